"""Node failures in a run (``systems.NAME.failures``): instances taken out, requests retried,
instances rebuilt.

The nodes fail and come back as :class:`~kvsim.sim.failure_process.NodeFailureProcess` draws it.
What the serving system does:

- **At a failure** every instance with a card on the node goes down (an instance over several
  nodes is down while any of them is). It stops taking work: it leaves its role on the load
  board, so no router sends it anything. The requests it holds -- queued, running, loading, a
  prompt held for its handoff, a decode-side copy -- are started over: each is aborted wherever
  it is (as when its client gives up: its pages come back, a handoff flow is cancelled) and a
  fresh attempt of it goes through the front end's one router path
  (:meth:`~kvsim.sim.frontend.FrontEnd.route`), from its prompt. Its KV on the failed instance is
  lost (its page pool is empty once its requests are aborted). The request's record counts the
  retry and the seconds its failed attempt lasted (``retries``, ``retry_lost_s``); its
  milestones are reset, so its latencies are the finishing attempt's, measured from its arrival
  (the time lost is in them). A client timeout still runs from the arrival.
- **When every instance of a role is down**, the last one to fail stays on the board, paused (it
  admits nothing): what is routed to the role waits in its queue rather than having nowhere to
  go. When another instance of the role is back, the waiting requests move to it (the router
  chooses again); if the paused one is back first, it serves them.
- **At a repair** the node is up; an instance whose nodes are all up is rebuilt for ``rebuild``
  seconds (weights loaded, engine warmed) and then serves again with an empty KV pool. A node
  failing again during the rebuild cancels it.

With a ``kv_cache`` the KV cached on the node is lost with it: the failed instances' HBM
caches and the node's DRAM and NVMe tiers are emptied, nothing written down, and the cluster
index forgets the blocks (a cache-aware router stops counting on them); a remote pool, on its
own nodes, keeps its blocks. Transfers in flight are not cut: a load into a failed instance lets
its pages go when it lands, a write lands where it was going, and what a failed node's stores
received meanwhile is dropped again when an instance is rebuilt.

Not modelled (refused by :meth:`~kvsim.scenario.schema.SystemSpec.failure_problems`): peer HBM
(a failed node's HBM read or copied by its peers) and adaptive P:D controllers (a role switch
would bring a failed instance back). An iteration running on the instance when it fails still
ends and is accounted as engine time (what it computed is discarded); tokens a failed attempt
emitted count in the run's throughput; the nodes keep failing during the drain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence as Seq
from typing import TYPE_CHECKING, Any

import numpy as np

from kvsim.rng import RandomStreams
from kvsim.scenario.failures_spec import RunFailureSpec
from kvsim.sim.failure_process import NodeFailureProcess, time_at_least_up, up_fraction

if TYPE_CHECKING:
    from kvsim.serving.router import Routable, Router

__all__ = ["RunFailures", "attach_failures"]

_RESET_NAN = ("admit_s", "first_token_s", "prefill_end_s", "handoff_start_s", "handoff_landed_s", "handoff_end_s",
              "decode_start_s")


class _Registering:
    """The front end's router, noting each request's current attempt (by request id) as it is
    routed: a decode instance holds copies, and a retry starts over from the attempt itself."""

    def __init__(self, inner: Router, attempts: dict[int, Any]):
        self.inner = inner
        self.attempts = attempts

    def choose(self, instances: Seq[Routable], seq: Any = None) -> int:
        self.attempts[seq.rid] = seq
        return self.inner.choose(instances, seq)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class RunFailures:
    """A live system's node failures and what they do to it (see the module docstring).

    Parameters
    ----------
    system : kvsim.sim.build.System
        Built and checked.
    spec : RunFailureSpec
    streams : RandomStreams
        The run's streams (each node draws from ``failures.<node>``).
    """

    def __init__(self, system: Any, spec: RunFailureSpec, streams: RandomStreams):
        from kvsim.sim.build import node_names  # (build imports this module)

        self.system = system
        self.env = env = system.env
        self.spec = spec
        names = node_names(system.sizing)
        self.node_names = [name for _, name in names]
        rates = [spec.unit_failure_rate_per_s(pool.node.accelerators_per_node, 1) for pool, _ in names]
        self.node_availability_expected = [(1.0 / r) / (1.0 / r + spec.repair) if r > 0 else 1.0 for r in rates]
        position = {name: k for k, name in enumerate(self.node_names)}
        instances = system.instances
        # each instance's nodes, and each node's instances, in index order
        self.instance_nodes = [sorted({position[gpu.split("/")[0]] for gpu in inst.gpus}) for inst in instances]
        self.node_instances: list[list[int]] = [[] for _ in self.node_names]
        for index, nodes in enumerate(self.instance_nodes):
            for k in nodes:
                self.node_instances[k].append(index)
        n = len(instances)
        self.nodes_down = [0] * n             # per instance: how many of its nodes are down
        self.state = ["up"] * n               # up, down, rebuilding
        self._generation = [0] * n            # a rebuild serves only if nothing failed since it began
        self.max_num_seqs = [inst.scheduler.max_num_seqs for inst in instances]
        self.instance_down: list[list[list[float]]] = [[] for _ in instances]  # [down_s, serving_s]
        self.parked: dict[str, int] = {}      # role -> the paused instance still on the board
        self.kv_blocks_after_failure: list[int] = []  # per instance failure: pages still used once it is down
        self.kv_blocks_at_rebuild: list[int] = []  # per rebuild: pages used when it serves again
        self.blocks_dropped = {"hbm": 0, "dram": 0, "nvme": 0}  # cached KV blocks lost, by tier
        self.attempts: dict[int, Any] = {}
        self._attempt_start: dict[int, float] = {}
        self.timeline: list[dict[str, Any]] = []
        front = system.front
        front.router = _Registering(front.router, self.attempts)
        system.records.track_retries()
        self.process = NodeFailureProcess(env, self.node_names, rates, spec.repair, spec.repair_distribution,
                                          streams, self._node_failed, self._node_repaired)

    # -- what happens --------------------------------------------------------------------------
    @property
    def instances_up(self) -> int:
        """Instances serving now."""
        return self.state.count("up")

    def _log(self, event: str, node: int) -> None:
        self.timeline.append({"time_s": self.env.now, "event": event, "node": self.node_names[node],
                              "nodes_up": sum(self.process.up), "instances_up": self.instances_up})

    def _node_failed(self, k: int) -> None:
        going = []
        for index in self.node_instances[k]:
            self.nodes_down[index] += 1
            if self.state[index] == "up":
                going.append(index)
            elif self.state[index] == "rebuilding":
                self.state[index] = "down"
                self._generation[index] += 1
        held = []
        for index in going:
            held += self._take_down(index)
        self._retry(held)
        self._drop_kv(k, going)
        instances = self.system.instances
        for index in going:
            self.kv_blocks_after_failure.append(instances[index].pool.used_blocks)
        self._log("fail", k)

    def _drop_kv(self, k: int, indices: list[int], tiers: bool = True) -> None:
        """The KV node ``k`` held is lost: the prefix caches of instances ``indices`` and the
        node's DRAM and NVMe tiers, every block no transfer holds evicted (nothing written down)
        and forgotten by the cluster index. Blocks a transfer still holds go when they are let go
        of, at the latest when an instance is rebuilt (this runs again then)."""
        cache = self.system.cache
        if cache is None:
            return
        if cache.pending_reclaims:
            cache.settle_reclaims()
        index = cache.index
        for i in indices:
            hook = self.system.instances[i].scheduler.hook
            if not hasattr(hook, "hbm"):
                continue  # a decode instance caches nothing
            held = hook.hbm.used_blocks
            if not cache.has_lower:
                hook.flush()  # (per block or as extents; with nothing below HBM nothing is written)
            else:
                victims = hook.hbm.evict_run(hook.hbm.evictable_blocks)
                index.discard_run(victims, hook.hbm)
                hook.pool.give(len(victims) * hook.geometry.pages_per_block)
            self.blocks_dropped["hbm"] += held - hook.hbm.used_blocks
        if not tiers:
            return
        node = self.node_names[k]
        for tier, store in (("dram", cache.dram.get(node)), ("nvme", cache.nvme.get(node))):
            if store is not None and store.evictable_blocks:
                victims = store.evict_run(store.evictable_blocks)
                index.discard_run(victims, store)
                self.blocks_dropped[tier] += len(victims)

    def _take_down(self, index: int) -> list[int]:
        """Stop instance ``index`` serving; the ids of the requests it holds."""
        inst = self.system.instances[index]
        inst.settle()
        self.state[index] = "down"
        self._generation[index] += 1
        self.instance_down[index].append([self.env.now, math.inf])
        inst.scheduler.max_num_seqs = 0  # admits nothing while down (a parked instance queues)
        role = inst.role
        others = [m for m in self.system.board.members(role) if m is not inst]
        if others:
            inst.accepting = False
        else:
            self.parked[role] = index  # the role's last instance: what is routed to it waits here
        s = inst.scheduler
        held: list[int] = []
        for group in (s.running, list(s.loading.values()), s.waiting, list(s.detached.values())):
            held += [seq.rid for seq in group]
        return held

    def _retry(self, rids: list[int]) -> None:
        """Start each request over from its prompt (once, in the order found)."""
        front = self.system.front
        records = front.records
        seen = set()
        now = self.env.now
        for rid in rids:
            if rid in seen:
                continue
            seen.add(rid)
            seq = self.attempts.get(rid)
            if seq is None or seq.aborted:
                continue  # its client gave up
            copy = seq.decode_copy
            front._abort_on(records.prefill_instance[rid], seq)
            if copy is not None and front.abort_handoff is not None:
                front.abort_handoff(copy)
            last = copy if copy is not None else seq
            if last.generated < last.output_tokens:
                front._abort_on(records.instance[rid], last)
            seq.aborted = True
            if copy is not None:
                copy.aborted = True
            fresh = front.sequence_type(rid, seq.prompt_tokens, seq.output_tokens, on_finish=seq.on_finish,
                                        hashes=seq.hashes, sequence_hashes=seq.sequence_hashes)
            fresh.adapter = seq.adapter
            fresh.value_keys = seq.value_keys
            fresh.prompt_counted = seq.prompt_counted  # its input tokens counted once
            for name in _RESET_NAN:
                getattr(records, name)[rid] = math.nan
            records.instance[rid] = records.prefill_instance[rid] = -1
            records.retries[rid] += 1
            records.retry_lost_s[rid] += now - self._attempt_start.get(rid, records.arrival_s[rid])
            self._attempt_start[rid] = now
            if front.timeout_s is not None:  # the client's clock runs from the arrival
                left_s = max(0.0, records.arrival_s[rid] + front.timeout_s - now)
                env_timeout = self.env.timeout(left_s)
                env_timeout.callbacks.append(self.system.kernels.frontend._GiveUp(front, fresh))
            front.route(fresh)

    def _node_repaired(self, k: int) -> None:
        for index in self.node_instances[k]:
            self.nodes_down[index] -= 1
            if self.nodes_down[index] == 0 and self.state[index] == "down":
                self.state[index] = "rebuilding"
                self._generation[index] += 1
                if self.spec.rebuild > 0:
                    generation = self._generation[index]
                    self.env.timeout(self.spec.rebuild).callbacks.append(
                        lambda _event, index=index, generation=generation: self._rebuilt(index, generation))
                else:
                    self._rebuilt(index, self._generation[index])
        self._log("repair", k)

    def _rebuilt(self, index: int, generation: int) -> None:
        """Instance ``index`` serves again (unless it failed again while it was rebuilt)."""
        if generation != self._generation[index] or self.state[index] != "rebuilding":
            return
        inst = self.system.instances[index]
        for k in self.instance_nodes[index]:
            # what landed since the failure (the node's tiers only while none of its instances serves)
            serving = any(self.state[j] == "up" for j in self.node_instances[k])
            self._drop_kv(k, [index], tiers=not serving)
        self.kv_blocks_at_rebuild.append(inst.pool.used_blocks)
        self.state[index] = "up"
        self.instance_down[index][-1][1] = self.env.now
        inst.scheduler.max_num_seqs = self.max_num_seqs[index]
        role = inst.role
        parked = self.parked.get(role)
        if parked == index:
            del self.parked[role]  # it was still on the board: it serves what waited for it
        else:
            inst.accepting = True
            if parked is not None:
                del self.parked[role]
                self._unpark(self.system.instances[parked])
        inst.wake()
        self.timeline.append({"time_s": self.env.now, "event": "serving", "node": f"instance {index}",
                              "nodes_up": sum(self.process.up), "instances_up": self.instances_up})

    def _unpark(self, inst: Any) -> None:
        """The paused instance leaves the board; what waited there is routed again."""
        inst.accepting = False
        scheduler = inst.scheduler
        waiting = list(scheduler.waiting)
        for seq in waiting:
            scheduler.withdraw(seq)
        system = self.system
        for seq in waiting:
            if inst.role == "decode":
                system.handoff.route(seq)
            else:
                system.front.route(seq)
        inst.wake()

    # -- what it measured ---------------------------------------------------------------------
    def summary(self, start_s: float, end_s: float, slo: dict[str, float | None]) -> dict[str, Any]:
        """The run's ``failures`` section over the window ``[start_s, end_s]``: node and instance
        availability, failures, retried requests and what they did to the SLO."""
        process = self.process
        records = self.system.records
        nodes = process.availability(start_s, end_s)
        instances = [up_fraction(d, start_s, end_s) for d in self.instance_down]
        failed_in_window = sum(1 for d in process.down_intervals for a, _ in d if start_s <= a <= end_s)
        arrival = records.column("arrival_s")
        measured = (arrival >= start_s) & (arrival <= end_s)
        retries = records.column("retries")
        retried = measured & (retries > 0)
        lost = records.column("retry_lost_s")
        finished = ~np.isnan(records.column("finish_s"))
        e2e = records.column("finish_s") - arrival
        out: dict[str, Any] = {
            "nodes": len(self.node_names),
            "node_failures": failed_in_window,
            "node_failures_total": process.failures,
            "node_availability_expected": float(np.mean(self.node_availability_expected)),
            "node_availability": dict(zip(self.node_names, nodes)),
            "node_availability_mean": float(np.mean(nodes)),
            "instance_availability": instances,
            "instance_availability_mean": float(np.mean(instances)),
            "instances_up_at_end": self.instances_up,
            "retried_requests": int(np.count_nonzero(retried)),
            "retries": int(retries[measured].sum()),
            "retry_lost_s": float(lost[measured].sum()),
            "retry_lost_s_mean": float(lost[retried].mean()) if retried.any() else 0.0,
            "kv_blocks_after_failure": int(max(self.kv_blocks_after_failure, default=0)),
            "kv_blocks_at_rebuild": int(max(self.kv_blocks_at_rebuild, default=0)),
            "cached_blocks_lost": dict(self.blocks_dropped),
            "timeline": self.timeline,
        }
        ttft = records.column("first_token_s") - arrival
        for name, latency in (("ttft_s", ttft), ("e2e_s", e2e)):
            limit = slo.get(name)
            if limit is None:
                continue
            # the share of requests within the SLO (one not finished is not), retried or not
            for label, group in (("retried", retried), ("not_retried", measured & (retries == 0))):
                met = group & finished & (latency <= limit)
                out[f"{name[:-2]}_slo_met_{label}"] = float(met.sum() / group.sum()) if group.any() else None
        for k in range(1, len(self.node_names) + 1):
            out.setdefault("time_at_least_nodes_up", {})[str(k)] = time_at_least_up(
                process.down_intervals, len(self.node_names), k, start_s, end_s)
        return out


def attach_failures(system: Any, spec: RunFailureSpec | None, streams: RandomStreams) -> RunFailures | None:
    """Give a built system its node failures, if its spec has ``failures``."""
    if spec is None:
        return None
    return RunFailures(system, spec, streams)
