"""The P:D ratio controller of a disaggregated system, and role switches.

Every ``interval`` the controller reads its signal, decides how many instances change role
(static: none), starts those switches and records the decision -- time, signal value, the
counts before and the targets after -- together with a timeline sample (queue, attainment,
occupancy, counts) for the figure a planner reads. It acts only on its ticks, never faster.

A switch (:meth:`RoleController.switch`): the instance stops taking new work; requests it had
not started move to other instances of its role (they hold no KV here, so nothing moves); what
it has started drains; then it drops its prefix cache if it leaves a caching role, takes its new
role, and is out of service for ``switch_time`` before it accepts work. Draining (the default)
keeps every KV byte where it was computed; its cost is that a decode instance with long answers
in flight takes a while to leave. With ``on_switch: migrate`` a decode instance leaving decode
first moves the sequences it decodes to other decode instances (:mod:`kvsim.serving.migration`)
and drains only what is left (sequences about to finish, or with no room elsewhere).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import simpy

from kvsim.metrics.records import RequestRecords
from kvsim.metrics.summary import request_latencies
from kvsim.serving.handoff import KVHandoff, is_handoff
from kvsim.serving.instance import Instance
from kvsim.serving.migration import KVMigration, MigrationOutcome
from kvsim.serving.scheduler import AdmissionHook
from kvsim.serving.specs import PoolSpec, StaticController

__all__ = ["RoleController"]

_PIN_POLL_S = 0.01  # how often a drained instance checks that its cache's writes have landed

# which way a high signal pushes: +1 = prefill is short, -1 = decode is short
_ORIENTATION = {"prefill_queue": 1.0, "decode_queue": -1.0, "ttft_attainment": -1.0, "tpot_attainment": 1.0,
                "decode_kv_occupancy": -1.0}


class RoleController:
    """Moves instances between the prefill and decode roles (see the module docstring).

    Parameters
    ----------
    env : simpy.Environment
    spec : ControllerSpec
    instances : list of Instance
        Every instance of the system (roles prefill and decode).
    hooks : callable
        ``hooks(instance, role)``: the admission hook the instance uses in ``role``.
    handoff : KVHandoff
        Reroutes decode work that had not started; streams prompts from prefill instances.
    reroute_prompt : callable
        ``reroute_prompt(seq)``: sends a request not yet started to another prefill instance.
    records : RequestRecords
    slo_s : dict
        ``{"ttft_s": ..., "tpot_s": ...}`` thresholds (None where absent).
    pools : list of (str, PoolSpec), optional
        Each instance's pool, by instance index: only instances of switchable pools
        (:attr:`~kvsim.serving.specs.PoolSpec.may_switch`) move, within their pool's
        ``min_prefill`` / ``min_decode``. Default: every instance may move, unbounded.
    migration : KVMigration, optional
        Moves a leaving decode instance's sequences elsewhere (``on_switch: migrate``); None
        drains them.
    """

    def __init__(self, env: simpy.Environment, spec, instances: list[Instance],
                 hooks: Callable[[Instance, str], AdmissionHook | None], handoff: KVHandoff,
                 reroute_prompt: Callable, records: RequestRecords, slo_s: dict[str, float | None],
                 pools: list[tuple[str, PoolSpec]] | None = None, migration: KVMigration | None = None):
        self.env = env
        self.migration = migration
        self.spec = spec
        self.instances = instances
        self.hooks = hooks
        self.handoff = handoff
        self.reroute_prompt = reroute_prompt
        self.records = records
        self.slo_s = slo_s
        self.window_s = getattr(spec, "window", None) or spec.interval
        self.pools = pools
        names = getattr(spec, "signal_pools", None)
        # the instances the signal is measured over (None: all); pools are fixed, roles move
        self._measured: np.ndarray | None = None if names is None or pools is None else np.array(
            [inst.index for inst in instances if pools[inst.index][0] in names], dtype=np.int64)
        self._measured_set: frozenset[int] = frozenset(
            () if self._measured is None else self._measured.tolist())
        self.decisions: list[dict[str, Any]] = []
        self.switches: list[dict[str, Any]] = []
        self._target: dict[int, str] = {}  # instance -> the role it is switching to
        env.process(self._run())

    # -- what it sees -----------------------------------------------------------------------
    def _serving(self, role: str) -> list[Instance]:
        return [inst for inst in self.instances if inst.role == role and inst.accepting]

    def _attainment(self, latencies: dict, column: str, limit: float | None, since_s: float) -> float:
        """Share of requests whose ``column`` milestone fell in the trailing window that met the SLO
        (with ``signal_pools``: those whose first token, or last, the measured instances produced)."""
        if limit is None:
            return math.nan
        records = self.records
        if column == "ttft":
            recent = records.column("first_token_s") > since_s
            where = "prefill_instance"
        else:
            recent = (records.column("finish_s") > since_s) & (records.column("output_tokens") > 1)
            where = "instance"
        if self._measured is not None:
            recent &= np.isin(records.column(where), self._measured)
        met = latencies["ttft_s" if column == "ttft" else "tpot_s"][recent] <= limit
        return float(met.mean()) if met.size else math.nan

    def measure(self) -> dict[str, float]:
        """Every signal now (NaN where there is nothing to measure), over the instances of
        ``signal_pools`` where the spec names them."""
        for inst in self.instances:
            inst.settle()  # a coalesced decode run applies its steps so far: first tokens, pages
        prefill, decode = self._serving("prefill"), self._serving("decode")
        if self._measured is not None:
            measured = self._measured_set  # membership only: the instances' order is kept
            prefill = [inst for inst in prefill if inst.index in measured]
            decode = [inst for inst in decode if inst.index in measured]
        queue = sum(inst.pending_prompt_tokens for inst in prefill)
        # handed-off prompts a decode instance has not admitted yet: they wait for its KV room
        waiting = sum(1 for inst in decode for seq in inst.scheduler.waiting if is_handoff(seq))
        blocks = sum(inst.pool.num_blocks for inst in decode)
        since = self.env.now - self.window_s
        latencies = request_latencies(self.records)
        return {
            "prefill_queue": queue / len(prefill) if prefill else math.nan,
            "decode_queue": waiting / len(decode) if decode else math.nan,
            "ttft_attainment": self._attainment(latencies, "ttft", self.slo_s.get("ttft_s"), since),
            "tpot_attainment": self._attainment(latencies, "tpot", self.slo_s.get("tpot_s"), since),
            "decode_kv_occupancy": (sum(i.pool.used_blocks for i in decode) / blocks) if blocks else math.nan,
        }

    # -- what it decides ----------------------------------------------------------------------
    def _delta(self, value: float) -> int:
        """Instances to move toward prefill (negative: toward decode)."""
        spec = self.spec
        if isinstance(spec, StaticController) or math.isnan(value):
            return 0
        orient = _ORIENTATION[spec.signal]
        if spec.kind == "threshold":
            prefill_short = value > spec.high if orient > 0 else value < spec.low
            decode_short = value < spec.low if orient > 0 else value > spec.high
            return spec.step if prefill_short else (-spec.step if decode_short else 0)
        error = orient * (value - spec.setpoint)
        # clamped before rounding: a large gain times a large error is infinite, which no int holds
        return int(round(max(-spec.max_step, min(spec.max_step, spec.gain * error))))

    def _run(self):
        while True:
            yield self.env.timeout(self.spec.interval)
            self.tick()

    def tick(self) -> None:
        """One decision: measure, decide, start the switches, record."""
        signals = self.measure()
        signal = getattr(self.spec, "signal", None)
        value = signals[signal] if signal is not None else math.nan
        prefill, decode = self._serving("prefill"), self._serving("decode")  # what moves: every pool
        switching = len(self._target)
        wanted = self._delta(value)
        # moves still in flight the same way already answer this signal: count them (anti-windup)
        incoming = list(self._target.values())
        delta = max(0, wanted - incoming.count("prefill")) if wanted > 0 else min(0, wanted + incoming.count("decode"))
        moved = []
        if delta > 0:
            room = len(decode) - self.spec.min_decode
            moved = [(inst, "prefill") for inst in self._movable(decode, "decode", min(delta, room))]
        elif delta < 0:
            room = len(prefill) - self.spec.min_prefill
            moved = [(inst, "decode") for inst in self._movable(prefill, "prefill", min(-delta, room))]
        for inst, role in moved:
            self.env.process(self.switch(inst, role))
        applied = sum(1 if role == "prefill" else -1 for _, role in moved)
        self.decisions.append({
            "time_s": self.env.now, "signal": signal or "", "value": value, "prefill": len(prefill),
            "decode": len(decode), "switching": switching, "wanted": wanted, "moved": applied,
            "prefill_target": len(prefill) + applied, "decode_target": len(decode) - applied,
            **{f"signal_{name}": v for name, v in signals.items()},
        })

    def _movable(self, serving: list[Instance], role: str, count: int) -> list[Instance]:
        """Up to ``count`` of the ``serving`` instances of ``role`` to move out of it, least busy
        first: only instances of switchable pools, each pool keeping its own minimum in ``role``
        counting the moves already under way."""
        if count <= 0:
            return []
        if self.pools is None:
            return self._least_busy(serving)[:count]
        bound = "min_prefill" if role == "prefill" else "min_decode"
        held: dict[str, int] = {}  # per pool: instances in role once the switches under way are done
        for inst in self.instances:
            if self._target.get(inst.index, inst.role) == role:
                name = self.pools[inst.index][0]
                held[name] = held.get(name, 0) + 1
        out = []
        for inst in self._least_busy(serving):
            name, pool = self.pools[inst.index]
            if len(out) == count:
                break
            if pool.may_switch and held[name] > getattr(pool, bound):
                out.append(inst)
                held[name] -= 1
        return out

    @staticmethod
    def _least_busy(instances: list[Instance]) -> list[Instance]:
        return sorted(instances, key=lambda inst: (inst.outstanding, inst.index))

    # -- how a switch happens ---------------------------------------------------------------------
    def switch(self, inst: Instance, role: str):
        """Drain ``inst`` (a decode instance under ``on_switch: migrate`` first moves what it
        decodes elsewhere), give it ``role``, warm it up (a SimPy process)."""
        old = inst.role
        decided = self.env.now
        inst.accepting = False
        self._target[inst.index] = role
        scheduler = inst.scheduler
        # work not yet started holds no KV here: it goes to the instances staying in the role
        if old == "prefill":
            moving = [seq for seq in scheduler.waiting if not seq.admitted]
            reroute = self.reroute_prompt
        else:
            moving = [seq for seq in scheduler.waiting if is_handoff(seq)]
            reroute = self.handoff.route
        for seq in moving:
            scheduler.withdraw(seq)
        for seq in moving:
            reroute(seq)
        migrated = None
        if old == "decode" and self.migration is not None:
            migrated = yield self.env.process(self.migration.migrate_out(inst))
        yield inst.when_idle()
        drained = self.env.now
        moved = len(moving) + (migrated.rerouted if migrated is not None else 0)
        hbm = getattr(scheduler.hook, "hbm", None)
        if hbm is not None:
            # write-through copies of the last prompts may still pin blocks: let them land, so
            # the cache gives back every page before the instance takes its new role
            while hbm.pinned_blocks:
                yield self.env.timeout(_PIN_POLL_S)
            scheduler.hook.flush()
        inst.set_role(role, self.hooks(inst, role),
                      self.handoff.final_chunk if role == "prefill" else None)
        yield self.env.timeout(self.spec.switch_time)
        inst.accepting = True
        del self._target[inst.index]
        inst.wake()
        self.switches.append({"instance": inst.index, "pool": self.pools[inst.index][0] if self.pools else "",
                              "from_role": old, "to_role": role, "decided_s": decided,
                              "drained_s": drained, "ready_s": self.env.now, "moved_requests": moved,
                              **(_migration_columns(migrated, decided) if self.migration is not None else {})})


def _migration_columns(outcome: MigrationOutcome | None, decided_s: float) -> dict[str, Any]:
    """The switch record's migration columns (runs with ``on_switch: migrate``): requests and
    bytes moved, sequences that drained for want of room, and the seconds from the decision to
    the last flow landing (0 for a switch to decode, which moves nothing)."""
    if outcome is None:
        return {"migrated_requests": 0, "migrated_bytes": 0.0, "migration_kept": 0, "migration_s": 0.0}
    return {"migrated_requests": outcome.requests, "migrated_bytes": outcome.bytes,
            "migration_kept": outcome.kept, "migration_s": outcome.end_s - decided_s}

