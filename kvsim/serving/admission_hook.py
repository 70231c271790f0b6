"""The scheduler's seam for prefix caching and offload: what a hook is told at admission, at the
prompt's end, at release and at preemption (:class:`kvsim.serving.scheduler.BatchScheduler`
calls it; :class:`kvsim.serving.cache.instance_cache.InstanceCache` is the hook that caches)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the scheduler imports this module; the hook only names its types
    from kvsim.serving.scheduler import Batch
    from kvsim.serving.sequence import Sequence

__all__ = ["AdmissionHook"]


class AdmissionHook:
    """Prefix caching and offload, as seen by the scheduler. The base class caches nothing."""

    def admit(self, seq: Sequence, now: float) -> str | None:
        """Prepare ``seq`` for admission (it has ``kv_tokens == 0`` and no pages).

        Returns ``"run"`` (compute from ``seq.kv_tokens``), ``"load"`` (parked until the hook
        calls :meth:`BatchScheduler.loaded`), or None (not now: the KV pool lacks room).
        """
        return "run"

    def committed(self, seq: Sequence) -> None:
        """The admission prepared by :meth:`admit` went through (pages for its first work were
        found); an admission retried later is prepared again, and only the one that goes
        through is committed."""

    def prompt_done(self, seq: Sequence, now: float) -> None:
        """The prompt's KV is complete in HBM (the first token is about to be emitted)."""

    def released(self, seq: Sequence, finished: bool) -> None:
        """``seq`` gave back its pages: it finished, or was preempted (``finished=False``)."""

    def swap_out(self, seq: Sequence) -> bool:
        """Preempting ``seq``: copy its own pages to host memory instead of dropping them?

        True means the hook started the copy; ``seq`` keeps its token counts and, on its next
        :meth:`admit`, must get its pages back (``"load"``) rather than be recomputed.
        """
        return False

    def begin_remote_reads(self, batch: Batch) -> float | None:
        """An iteration of ``batch`` starts and reads ``batch.shape.remote_kv_tokens`` context
        tokens in place from peers' HBM: the per-card rate of those reads, bytes/s (None: the
        step model's uncontended rate)."""
        return None

    def end_remote_reads(self) -> None:
        """The iteration :meth:`begin_remote_reads` was told of has ended."""
