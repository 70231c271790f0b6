"""Per-request records held in columnar numpy arrays (one array per field, not one object per request)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["RequestRecords"]

_FLOAT_FIELDS = ("arrival_s", "admit_s", "first_token_s", "finish_s", "aborted_s")
_INT_FIELDS = ("input_tokens", "output_tokens", "preemptions", "instance")
_CACHE_INT_FIELDS = ("hit_tokens_hbm", "hit_tokens_dram", "hit_tokens_nvme", "hit_tokens_remote",
                     "computed_tokens")
_CACHE_FLOAT_FIELDS = ("loaded_bytes", "written_bytes")
_PEER_INT_FIELDS = ("hit_tokens_peer_hbm", "hit_tokens_other_domain")
_PD_FLOAT_FIELDS = ("prefill_end_s", "handoff_start_s", "handoff_landed_s", "handoff_end_s", "decode_start_s")
_PD_INT_FIELDS = ("prefill_instance",)
_LORA_INT_FIELDS = ("adapter",)
_PD_BYTES_FIELDS = ("handoff_bytes",)
_REJECT_FIELDS = ("rejected_s",)
_NAN_FIELDS = _FLOAT_FIELDS + _PD_FLOAT_FIELDS + _REJECT_FIELDS
_RETRY_FIELDS = ("retries", "retry_lost_s")  # only with node failures (track_retries)
_MIGRATION_FIELDS = ("migrations",)  # only with KV migration on a switch (track_migrations)


class RequestRecords:
    """Growable columnar table of request milestones.

    Times are seconds of simulated time; a milestone not reached is NaN. ``aborted_s`` is when
    the client gave up on the request (``workload.timeout``); such a request never finishes. ``instance`` is the
    index of the instance that served the request (-1 before routing). Cache columns:
    ``hit_tokens_<tier>`` prompt tokens served from that tier's cached KV (counted at every
    admission, so a recomputed request can hit again), ``computed_tokens`` prompt tokens
    computed (recomputation included), ``loaded_bytes`` / ``written_bytes`` KV bytes moved
    into HBM for it and written down from it.

    Disaggregated serving (NaN / -1 when a request never left one instance): ``prefill_end_s``
    when its prompt was computed, ``handoff_start_s`` / ``handoff_landed_s`` the KV transfer to
    the decode instance, ``handoff_end_s`` when the decode instance may use it (a layer-by-layer
    handoff also waits for the prompt's last layer), ``decode_start_s`` the start of its first
    decode iteration (or of its recomputation, if the decode instance preempted it before),
    ``prefill_instance`` where its prompt ran (``instance`` is where it was decoded) and
    ``handoff_bytes`` the KV bytes moved (if its client gave up while they were moving, the bytes
    delivered until then; ``handoff_landed_s`` stays NaN).

    Peer HBM (``kv_cache.peer_hbm``, zero without it): ``hit_tokens_peer_hbm`` prompt tokens
    served from another instance's HBM in the same addressing domain, ``hit_tokens_other_domain``
    from an instance's HBM in another domain (see :mod:`kvsim.serving.cache.access`);
    ``hit_tokens_hbm`` is the instance's own HBM.

    ``adapter`` is the LoRA adapter a request named (``workload.adapters``; -1: the base model).

    ``rejected_s`` is when a request was refused at arrival because it could never fit the KV
    pool of an instance that would serve it (a trace's longest requests); it is never routed and
    has no other milestone.

    With node failures in the run (``systems.NAME.failures``, :meth:`track_retries`) two more
    columns (:attr:`extra_fields`): ``retries``, how many times the request was started over
    because an instance holding it failed, and ``retry_lost_s``, the seconds its failed attempts
    lasted (from the arrival, or the previous retry, to the failure). Its milestones are then
    those of the attempt that finished (its first token, admission, handoff), measured from its
    arrival; its cache and token counts add up every attempt's work.

    With KV migration on a role switch (``controller.on_switch: migrate``, :meth:`track_migrations`)
    one more column: ``migrations``, how many times the request's KV moved, while it was decoding,
    from a decode instance leaving decode to another one (``instance`` is the last, where it
    finished).
    """

    fields = (_FLOAT_FIELDS + _INT_FIELDS + _CACHE_INT_FIELDS + _CACHE_FLOAT_FIELDS + _PD_FLOAT_FIELDS
              + _PD_INT_FIELDS + _PD_BYTES_FIELDS + _PEER_INT_FIELDS
              + _LORA_INT_FIELDS + _REJECT_FIELDS)
    colocated_fields = _FLOAT_FIELDS + _INT_FIELDS + _CACHE_INT_FIELDS + _CACHE_FLOAT_FIELDS
    """The fields every colocated system fills (the others stay NaN / -1 / 0; the peer-HBM hit
    columns are filled only with ``kv_cache.peer_hbm``)."""

    # The columns (set in __init__, track_retries and track_migrations by name, from the field
    # tuples above), declared for the type checker: float64 columns, then int64 ones.
    arrival_s: npt.NDArray[np.float64]
    admit_s: npt.NDArray[np.float64]
    first_token_s: npt.NDArray[np.float64]
    finish_s: npt.NDArray[np.float64]
    aborted_s: npt.NDArray[np.float64]
    prefill_end_s: npt.NDArray[np.float64]
    handoff_start_s: npt.NDArray[np.float64]
    handoff_landed_s: npt.NDArray[np.float64]
    handoff_end_s: npt.NDArray[np.float64]
    decode_start_s: npt.NDArray[np.float64]
    rejected_s: npt.NDArray[np.float64]
    loaded_bytes: npt.NDArray[np.float64]
    written_bytes: npt.NDArray[np.float64]
    handoff_bytes: npt.NDArray[np.float64]
    retry_lost_s: npt.NDArray[np.float64]
    input_tokens: npt.NDArray[np.int64]
    output_tokens: npt.NDArray[np.int64]
    preemptions: npt.NDArray[np.int64]
    instance: npt.NDArray[np.int64]
    hit_tokens_hbm: npt.NDArray[np.int64]
    hit_tokens_dram: npt.NDArray[np.int64]
    hit_tokens_nvme: npt.NDArray[np.int64]
    hit_tokens_remote: npt.NDArray[np.int64]
    computed_tokens: npt.NDArray[np.int64]
    prefill_instance: npt.NDArray[np.int64]
    hit_tokens_peer_hbm: npt.NDArray[np.int64]
    hit_tokens_other_domain: npt.NDArray[np.int64]
    adapter: npt.NDArray[np.int64]
    retries: npt.NDArray[np.int64]
    migrations: npt.NDArray[np.int64]

    def __init__(self, capacity: int = 1024):
        capacity = max(int(capacity), 16)
        self.n = 0
        for name in _NAN_FIELDS:
            setattr(self, name, np.full(capacity, np.nan))
        for name in _INT_FIELDS + _CACHE_INT_FIELDS + _PD_INT_FIELDS + _PEER_INT_FIELDS + _LORA_INT_FIELDS:
            setattr(self, name, np.zeros(capacity, dtype=np.int64))
        for name in _CACHE_FLOAT_FIELDS + _PD_BYTES_FIELDS:
            setattr(self, name, np.zeros(capacity))
        self.extra_fields: tuple[str, ...] = ()  # columns of some runs only (track_retries, track_migrations)

    def track_retries(self) -> None:
        """Add the ``retries`` and ``retry_lost_s`` columns (a run with node failures)."""
        if "retries" in self.extra_fields:
            return
        capacity = len(self.arrival_s)
        self.retries = np.zeros(capacity, dtype=np.int64)
        self.retry_lost_s = np.zeros(capacity)
        self.extra_fields = self.extra_fields + _RETRY_FIELDS

    def track_migrations(self) -> None:
        """Add the ``migrations`` column (a run whose controller migrates KV on a switch)."""
        if "migrations" in self.extra_fields:
            return
        self.migrations = np.zeros(len(self.arrival_s), dtype=np.int64)
        self.extra_fields = self.extra_fields + _MIGRATION_FIELDS

    @property
    def all_fields(self) -> tuple[str, ...]:
        """Every column of these records: :attr:`fields` and the run's :attr:`extra_fields`."""
        return self.fields + self.extra_fields

    def _grow(self) -> None:
        capacity = len(self.arrival_s) * 2
        for name in self.all_fields:
            old = getattr(self, name)
            new = np.full(capacity, np.nan) if name in _NAN_FIELDS else np.zeros(capacity, dtype=old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)

    def add(self, arrival_s: float, input_tokens: int, output_tokens: int) -> int:
        """Append a request; returns its id (row index)."""
        if self.n == len(self.arrival_s):
            self._grow()
        i = self.n
        self.arrival_s[i] = arrival_s
        self.input_tokens[i] = input_tokens
        self.output_tokens[i] = output_tokens
        self.instance[i] = -1
        self.prefill_instance[i] = -1
        self.adapter[i] = -1
        self.n += 1
        return i

    def column(self, name: str) -> np.ndarray:
        """A view of the filled part of one field."""
        values: np.ndarray = getattr(self, name)
        return values[: self.n]

    def columns(self) -> dict[str, np.ndarray]:
        """The records as columns (copies), one entry per request: ``request_id``, every field,
        and the derived latencies ``ttft_s``, ``e2e_s`` and ``tpot_s`` (NaN where a milestone
        was not reached; ``tpot_s`` also for a single output token): the columns of
        :meth:`to_frame` and of ``requests.parquet``."""
        out: dict[str, np.ndarray] = {"request_id": np.arange(self.n, dtype=np.int64)}
        out.update((name, self.column(name).copy()) for name in self.all_fields)
        out["ttft_s"] = out["first_token_s"] - out["arrival_s"]
        out["e2e_s"] = out["finish_s"] - out["arrival_s"]
        outputs = out["output_tokens"]
        decode_steps = np.where(outputs > 1, outputs - 1, np.nan)  # float64, as pandas' where() makes it
        out["tpot_s"] = (out["finish_s"] - out["first_token_s"]) / decode_steps
        return out

    def to_frame(self) -> pd.DataFrame:
        """The records as a DataFrame (a copy), one row per request, with derived latencies
        (:meth:`columns`)."""
        import pandas as pd  # only where frames are made: a run itself needs no pandas

        return pd.DataFrame(self.columns())
