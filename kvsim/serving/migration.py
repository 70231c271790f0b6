"""KV migration when a decode instance leaves decode (``controller.on_switch: migrate``).

A role switch drains by default (:meth:`kvsim.serving.controller.RoleController.switch`): the
instance finishes every sequence it runs, which with long answers takes minutes. With migration
the sequences it is decoding move instead, in rounds:

1. Each running sequence that is decoding and has more than one token to go is *paused*: the
   scheduler stops giving it steps (it is marked ``stalled``, the flag a sequence waiting for a
   cache load carries), so it stops at the end of the iteration in flight, which still emits
   its token. A sequence with one token left, or still computing a prompt, finishes here.
2. Once that iteration has ended (the engine formed another batch, or sleeps), each paused
   sequence picks a decode instance: the least busy (fewest requests outstanding, ties by
   index) among those serving decode, not switching, with free pages for its KV plus its next
   token, a free sequence slot and, under a LoRA adapter, an adapter slot. The pages are reserved there at once (the copy waits in the
   target's ``loading``, as a handed-off prompt does) and its KV moves as flows on the topology,
   one per target card, over the same paths and with the same bytes per card as the prefill ->
   decode handoff (:meth:`kvsim.serving.handoff.KVHandoff.start_flow`): the sequence's pages,
   ``kv_blocks * block_size_tokens`` tokens of KV, one flow per card for the whole run of
   pages (never one per page). A sequence with no such instance is let go on here (it drains;
   the switch record counts it).
3. When a sequence's flows have landed, the source gives back its pages and the target resumes
   it with every token it had (no recompute); ``instance`` in its record becomes the target's,
   ``migrations`` counts the move.

Rounds repeat while the instance still has handed-off prompts loading (once landed they decode
and can move too). A sequence the instance had preempted before (waiting to recompute, no KV
here) goes to the least busy decode instance and recomputes there, as does one preempted while
paused (the next round finds it waiting).
The controller waits for the last flow to land, then for the instance to drain what is left.

The pause is polled every :data:`POLL_S` (the iteration boundary is the engine's, not an event
others can wait on): a move starts at most that late after the boundary. Nothing here runs per
token. Clients that give up (``workload.timeout``) and node failures are refused with migration
(:meth:`kvsim.scenario.schema.ScenarioSpec`'s checks).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field

import simpy

from kvsim.metrics.records import RequestRecords
from kvsim.network.transfers import Transfers
from kvsim.serving.instance import Instance
from kvsim.serving.sequence import Sequence

__all__ = ["KVMigration", "MigrationOutcome", "POLL_S"]

POLL_S = 0.005
"""How often a migrating instance checks that its iteration in flight has ended, seconds (an
iteration lasts tens of milliseconds: a move starts at most this late after it)."""


@dataclass
class MigrationOutcome:
    """What one instance's migration did (the switch record's ``migrated_*`` columns).

    Attributes
    ----------
    requests : int
        Sequences whose KV moved to another decode instance.
    bytes : float
        KV bytes moved, all flows together.
    kept : int
        Sequences paused that found no decode instance with room: they drained here.
    rerouted : int
        Sequences preempted here before the switch, waiting to recompute (no KV held), sent to
        another decode instance to recompute there.
    end_s : float
        When the last flow landed (the decision time if nothing moved), seconds.
    """

    requests: int = 0
    bytes: float = 0.0
    kept: int = 0
    rerouted: int = 0
    end_s: float = 0.0
    landed: list[simpy.Event] = field(default_factory=list)


class KVMigration:
    """Moves a leaving decode instance's running sequences to other decode instances (see the
    module docstring).

    Parameters
    ----------
    env : simpy.Environment
    transfers : Transfers
        The system's one way to move bytes.
    records : RequestRecords
        Must carry the ``migrations`` column (:meth:`RequestRecords.track_migrations`).
    targets : callable
        ``targets()``: the instances serving decode now (accepting work, not switching).
    kv_bytes_per_card : callable
        ``kv_bytes_per_card(instance, tokens)``: KV bytes ``tokens`` tokens hold on each of the
        instance's cards (the handoff's).
    gpu_direct : bool
        NIC DMA between device memories across nodes (the handoff's ``gpu_direct``).
    """

    def __init__(self, env: simpy.Environment, transfers: Transfers, records: RequestRecords,
                 targets: Callable[[], list[Instance]], kv_bytes_per_card: Callable[[Instance, int], float],
                 gpu_direct: bool = True):
        self.env = env
        self.transfers = transfers
        self.records = records
        self.targets = targets
        self.kv_bytes_per_card = kv_bytes_per_card
        self.gpu_direct = gpu_direct

    def migrate_out(self, inst: Instance) -> Generator[simpy.Event, object, MigrationOutcome]:
        """Move what ``inst`` decodes elsewhere, round by round, and wait for the last flow to
        land (a SimPy process generator; its value is the :class:`MigrationOutcome`). ``inst``
        no longer takes work."""
        env = self.env
        out = MigrationOutcome(end_s=env.now)
        kept: set[int] = set()  # rids left to drain here (no room anywhere when they were paused)
        scheduler = inst.scheduler
        while True:
            inst.interrupt()  # a coalesced run ends at the step in flight: the state is now's
            # preempted sequences waiting to recompute hold no KV here: they recompute elsewhere
            for seq in [seq for seq in scheduler.waiting if seq.admitted and seq.cache is None]:
                target = self._least_busy(inst)
                if target is None:
                    break
                scheduler.withdraw(seq)
                target.submit(seq)
                out.rerouted += 1
            paused = [seq for seq in scheduler.running if _movable(seq) and seq.rid not in kept]
            if not paused:
                if not scheduler.loading:
                    break
                yield env.timeout(POLL_S)  # handed-off prompts still landing: they may move next
                continue
            for seq in paused:
                seq.stalled = True
                scheduler.stalled += 1
            in_flight = scheduler.batches_formed
            while True:
                inst.settle()
                if not inst._in_flight or scheduler.batches_formed > in_flight:
                    break  # the iteration that was running has ended
                yield env.timeout(POLL_S)
            inst.interrupt()
            for seq in paused:
                if not (seq.stalled and seq in scheduler.running):
                    continue  # preempted while paused: the next round sends it to recompute elsewhere
                target = self._target(inst, seq)
                if target is None:
                    seq.stalled = False
                    scheduler.stalled -= 1
                    kept.add(seq.rid)
                    out.kept += 1
                    continue
                self._move(inst, seq, target, out)
            inst.wake()
        if out.landed:
            yield simpy.AllOf(env, out.landed)
        return out

    def _least_busy(self, source: Instance) -> Instance | None:
        """The decode instance other than ``source`` with the fewest requests outstanding (ties
        by index), or None."""
        others = [inst for inst in self.targets() if inst is not source]
        return min(others, key=lambda i: (i.outstanding, i.index)) if others else None

    def _target(self, source: Instance, seq: Sequence) -> Instance | None:
        """The least busy decode instance with pages for ``seq``'s KV and next token, a free
        sequence slot and, under a LoRA adapter, a slot for it (ties by index), or None."""
        tokens = seq.kv_tokens + 1
        for inst in sorted(self.targets(), key=lambda i: (i.outstanding, i.index)):
            if inst is source:
                continue
            inst.settle()
            scheduler = inst.scheduler
            pool = inst.pool
            adapters = scheduler.adapters
            if (len(scheduler.running) + len(scheduler.loading) < scheduler.max_num_seqs
                    and pool.blocks_for(tokens) <= pool.free_blocks
                    and (adapters is None or adapters.fits(seq, adapters.active(scheduler.running,
                                                                                  scheduler.loading.values())))):
                return inst
        return None

    def _move(self, source: Instance, seq: Sequence, target: Instance, out: MigrationOutcome) -> None:
        """Reserve ``seq``'s pages on ``target`` and start its KV flows there."""
        target.interrupt()
        copy = type(seq)(seq.rid, seq.prompt_tokens, seq.output_tokens, on_finish=seq.on_finish)
        for name in ("generated", "kv_tokens", "prefill_target", "adapter", "prompt_counted", "preemptions",
                     "hashes", "sequence_hashes"):
            setattr(copy, name, getattr(seq, name))
        copy.admitted = True
        if not target.pool.grow(copy, copy.kv_tokens + 1):
            raise RuntimeError(f"instance {target.index} had room for request {seq.rid} and then had not")
        target.scheduler.loading[copy.rid] = copy
        target._load_changed()
        tokens = seq.kv_blocks * source.pool.block_size_tokens  # the pages it holds, whole
        per_card = self.kv_bytes_per_card(target, tokens)
        tp_src, tp_dst = len(source.gpus), len(target.gpus)
        topology = self.transfers.topology
        paths = [topology.peer_path(source.gpus[(i * tp_src) // tp_dst], gpu, self.gpu_direct)
                 for i, gpu in enumerate(target.gpus)]
        done = self.transfers.move(paths, per_card, "migration")
        done.callbacks.append(lambda _event: self._landed(source, seq, target, copy, out))
        out.requests += 1
        out.bytes += per_card * tp_dst
        out.landed.append(done)

    def _landed(self, source: Instance, seq: Sequence, target: Instance, copy: Sequence,
                out: MigrationOutcome) -> None:
        """The KV is on ``target``: the source lets go of ``seq``, the target decodes ``copy``."""
        scheduler = source.scheduler
        source.interrupt()
        if seq in scheduler.running:
            scheduler.running.remove(seq)
            if seq.stalled:
                seq.stalled = False
                scheduler.stalled -= 1
            source.pool.release(seq)
            if scheduler.hook is not None:
                scheduler.hook.released(seq, finished=False)
        elif seq in scheduler.waiting:
            scheduler.withdraw(seq)  # preempted by the source while its KV moved: the copy goes on
        source.wake()
        rid = seq.rid
        self.records.instance[rid] = target.index
        self.records.migrations[rid] += 1
        target.scheduler.loaded(copy)
        target.wake()
        out.end_s = max(out.end_s, self.env.now)


def _movable(seq: Sequence) -> bool:
    """``seq`` decodes (its prompt's KV whole) and will not finish in the iteration in flight."""
    return (not seq.stalled and not seq.gated and not seq.aborted and seq.kv_tokens >= seq.prefill_target
            and seq.generated + 1 < seq.output_tokens)
