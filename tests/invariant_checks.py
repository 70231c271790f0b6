"""Run a scenario with the live systems observed, and list every invariant it breaks.

:func:`observed_run` runs a scenario through the public API (``kvsim.run``) while watching,
without changing what it does:

- the live :class:`~kvsim.sim.build.System` of each run (``build_system`` wrapped, as the
  ``built_systems`` fixture of conftest.py does), for the KV stores, the cluster index, the page
  pools and the engine's own count of requests in the system;
- each time the front end hands a request's last token to its client (``FrontEnd._leave``), to
  count finishes per request;
- each read of a block from a tier below HBM (``BlockStore.lookup``, or ``lookup_pin_run`` for a
  load's run of blocks, on the DRAM, NVMe and remote stores: a load is the only reader there; a
  store kept as extents, ``ExtentStore.lookup_pin_run``, its blocks named ``(chain, position)``),
  with its simulated time, and each block put into one
  (the index's watchers), in the order they happen;
- each swap out and in (``Swapper``), with its bytes, and each preemption
  (``BatchScheduler._preempt``) with the number of batches its instance had formed;
- which live system each summarised run came from (``collect``): with ``warmup: auto`` the
  measured pass, with ``layout: best`` the winning layout's full run (its pilots and the other
  finalists are built and watched too, but not summarised).

:func:`violations` then checks the result against what must hold in every run (the
disaggregation checks, handoff bytes and controllers, are in :mod:`invariant_checks_pd`); each
problem is one line naming the system and the invariant. The tolerances are stated where they
are used: exact (integer) counts and orders; ``RTOL`` for sums of floats that two code paths
add in different orders.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import kvsim
from invariant_checks_pd import controller_problems, handoff_problems
from kvsim.kv.extents import ExtentStore
from kvsim.kv.store import BlockStore
from kvsim.metrics.steady_state import in_system_integral, request_ends_s
from kvsim.rng import RandomStreams
from kvsim.serving.cache.swapper import Swapper
from kvsim.serving.scheduler import BatchScheduler
from kvsim.sim import frontend as frontend_module
from kvsim.sim import run as run_module
from kvsim.workload import open_loop_requests

__all__ = ["Observed", "observed_run", "violations", "effects", "RTOL"]

RTOL = 1e-9
"""Relative tolerance for two float sums of the same terms added in different orders (the
rounding of a few thousand additions is ~1e-13 relative; 1e-9 leaves room and still catches any
lost or double-counted request-second)."""

LOWER_TIERS = ("dram", "nvme", "remote")


@dataclass
class SystemWatch:
    """What was seen of one live system."""

    system: Any
    finishes: dict[int, int] = field(default_factory=dict)  # rid -> times its last token reached the client
    events: list[tuple] = field(default_factory=list)  # ("put" | "read", store id, block, hit, time) in order
    initial: dict[int, set] = field(default_factory=dict)  # store id -> blocks held when the run began
    tiers: dict[int, str] = field(default_factory=dict)  # lower-tier store id -> tier
    swaps: list[tuple] = field(default_factory=list)  # ("out" | "in", rid, bytes, time) in order
    preemptions: dict[tuple, int] = field(default_factory=dict)  # (scheduler, rid, batches formed) -> count


@dataclass
class Observed:
    result: kvsim.RunResult
    watches: dict[str, SystemWatch]  # system name -> the watch of the run that was summarised
    built: int = 0  # systems built (pilots and finalists of a layout search, both passes of warmup: auto)


def observed_run(scenario: kvsim.Scenario, monkeypatch, seed: int | None = None) -> Observed:
    """``kvsim.run(scenario, seed)`` with the live systems watched (see the module docstring)."""
    watches: list[SystemWatch] = []
    by_front: dict[int, SystemWatch] = {}
    by_store: dict[int, SystemWatch] = {}
    by_cache: dict[int, SystemWatch] = {}
    real_build = run_module.build_system

    def build(*args, **kwargs):
        system = real_build(*args, **kwargs)
        watch = SystemWatch(system)
        watches.append(watch)
        by_front[id(system.front)] = watch
        cache = system.cache
        if cache is not None:
            by_cache[id(cache)] = watch
            stores = [(s, "dram") for s in cache.dram.values()] + [(s, "nvme") for s in cache.nvme.values()]
            stores += [(s, "remote") for s in cache.remote]
            for store, tier in stores:
                watch.tiers[id(store)] = tier
                watch.initial[id(store)] = set()
                by_store[id(store)] = watch
            if not cache.extents:
                # what the prewarm (inside build_system) already put there
                for block, where in cache.index._where.items():
                    for store in where:
                        if id(store) in watch.initial:
                            watch.initial[id(store)].add(block)

                def heard(block, store, added, watch=watch):
                    if added and id(store) in watch.tiers:
                        watch.events.append(("put", id(store), block, True, None))

                cache.index.watch(heard)
            else:  # kept as extents: blocks are (chain, position), the index's news per stretch
                for chain, stretches in cache.index._maps.items():
                    for start, end, where in zip(stretches.starts, stretches.ends, stretches.values):
                        for store in where:
                            if id(store) in watch.initial:
                                watch.initial[id(store)].update((chain, p) for p in range(start, end))

                def heard_stretch(chain, start, end, store, added, watch=watch):
                    if added and id(store) in watch.tiers:
                        watch.events.extend(("put", id(store), (chain, p), True, None) for p in range(start, end))

                cache.index.watch(heard_stretch)
        return system

    real_leave = frontend_module.FrontEnd._leave

    def leave(self, seq):
        if not seq.aborted:
            finishes = by_front[id(self)].finishes
            finishes[seq.rid] = finishes.get(seq.rid, 0) + 1
        return real_leave(self, seq)

    real_lookup = BlockStore.lookup

    def lookup(self, block):
        hit = real_lookup(self, block)
        watch = by_store.get(id(self))
        if watch is not None:
            watch.events.append(("read", id(self), block, hit, watch.system.env.now))
        return hit

    real_lookup_pin_run = BlockStore.lookup_pin_run

    def lookup_pin_run(self, blocks):
        blocks = list(blocks)
        real_lookup_pin_run(self, blocks)  # (raises at a block not stored: a bug the run reports)
        watch = by_store.get(id(self))
        if watch is not None:
            now = watch.system.env.now
            watch.events.extend(("read", id(self), block, True, now) for block in blocks)

    real_extent_pin_run = ExtentStore.lookup_pin_run

    def extent_lookup_pin_run(self, chain, start, end):
        real_extent_pin_run(self, chain, start, end)  # (raises at a block not stored: a bug the run reports)
        watch = by_store.get(id(self))
        if watch is not None:
            now = watch.system.env.now
            watch.events.extend(("read", id(self), (chain, p), True, now) for p in range(start, end))

    def swapped(real, direction):
        def wrapper(self, seq):
            nbytes = self._kv_bytes_per_card(seq.kv_tokens) * self.cache.geometry.tp
            outcome = real(self, seq)
            if outcome not in (False, None):
                by_cache[id(self.system)].swaps.append((direction, seq.rid, nbytes, self.system.env.now))
            return outcome
        return wrapper

    real_preempt = BatchScheduler._preempt
    schedulers: dict[int, SystemWatch] = {}

    def preempt(self, seq):
        watch = schedulers.get(id(self))
        if watch is None:  # a scheduler's first preemption: find its system
            watch = next(w for w in watches if any(i.scheduler is self for i in w.system.instances))
            schedulers[id(self)] = watch
        key = (id(self), seq.rid, self.batches_formed)
        watch.preemptions[key] = watch.preemptions.get(key, 0) + 1
        return real_preempt(self, seq)

    real_collect = run_module.collect
    summarised: dict[int, SystemWatch] = {}  # id(SystemRun) -> the watch of the system it summarises

    def collect(system, *args, **kwargs):
        run = real_collect(system, *args, **kwargs)
        summarised[id(run)] = next(w for w in watches if w.system is system)
        return run

    with monkeypatch.context() as patch:
        patch.setenv("KVSIM_BACKEND", "python")  # the watches below patch the reference's classes
        patch.setattr(run_module, "collect", collect)
        patch.setattr(BatchScheduler, "_preempt", preempt)
        patch.setattr(Swapper, "swap_out", swapped(Swapper.swap_out, "out"))
        patch.setattr(Swapper, "swap_in", swapped(Swapper.swap_in, "in"))
        patch.setattr(run_module, "build_system", build)
        patch.setattr(frontend_module.FrontEnd, "_leave", leave)
        patch.setattr(BlockStore, "lookup", lookup)
        patch.setattr(BlockStore, "lookup_pin_run", lookup_pin_run)
        patch.setattr(ExtentStore, "lookup_pin_run", extent_lookup_pin_run)
        result = kvsim.run(scenario, seed=seed)
    return Observed(result, {run.system: summarised[id(run)] for run in result.runs}, len(watches))


def _ordered(problems: list[str], name: str, early: np.ndarray, late: np.ndarray, what: str,
             slack_s: float = 0.0) -> None:
    both = ~np.isnan(early) & ~np.isnan(late)
    bad = np.flatnonzero(both & (late < early - slack_s))
    if bad.size:
        k = bad[0]
        problems.append(f"{name}: {what} for {bad.size} requests (request {k}: {early[k]!r} > {late[k]!r})")


def _records(problems: list[str], name: str, run, spec, timeout_s: float | None) -> None:
    r = run.records
    col = r.column
    arrival, admit, first, finish, aborted = (col(f) for f in ("arrival_s", "admit_s", "first_token_s", "finish_s",
                                                                "aborted_s"))
    if np.isnan(arrival).any() or (arrival < 0).any() or (arrival >= spec.duration).any():
        problems.append(f"{name}: an arrival time outside [0, duration)")
    done, gone = ~np.isnan(finish), ~np.isnan(aborted)
    if (done & gone).any():
        problems.append(f"{name}: {int((done & gone).sum())} requests both finished and aborted")
    rejected_s = col("rejected_s")
    refused = ~np.isnan(rejected_s)
    if (refused & (done | gone | ~np.isnan(admit) | ~np.isnan(first))).any():
        problems.append(f"{name}: a request rejected at arrival with another milestone")
    if (rejected_s[refused] != arrival[refused]).any():
        problems.append(f"{name}: a request rejected other than at its arrival")
    if (done & (np.isnan(admit) | np.isnan(first))).any():
        problems.append(f"{name}: a finished request without an admission or first-token time")
    if (~np.isnan(first) & np.isnan(admit)).any():
        problems.append(f"{name}: a first token without an admission")
    _ordered(problems, name, arrival, admit, "admitted before arriving")
    _ordered(problems, name, admit, first, "first token before admission")
    _ordered(problems, name, first, finish, "finished before the first token")
    _ordered(problems, name, arrival, aborted, "aborted before arriving")
    # the first token's time is when the client has it (emitted + engine.output_s); a client
    # that gives up while it streams never sees it (see test_a_client_that_gave_up_sees_no_first_token)
    _ordered(problems, name, admit, aborted, "admitted after its client gave up")
    _ordered(problems, name, first, aborted, "first token after its client gave up")
    if timeout_s is not None:
        waited = aborted[gone] - arrival[gone]
        if waited.size and not np.allclose(waited, timeout_s, rtol=RTOL, atol=1e-9):
            problems.append(f"{name}: aborted after {waited.min():.9g}-{waited.max():.9g} s, not the {timeout_s} s timeout")
        if (done & (finish - arrival > timeout_s * (1 + RTOL) + 1e-9)).any():
            problems.append(f"{name}: a request finished after its client's timeout")
    elif gone.any():
        problems.append(f"{name}: requests aborted without a timeout")
    end_limit = spec.duration + spec.drain_limit_s
    if (finish > end_limit * (1 + RTOL)).any():
        problems.append(f"{name}: a finish after the drain limit")
    if (col("output_tokens") < 1).any() or (col("input_tokens") < 1).any():
        problems.append(f"{name}: a request with no prompt or no output token")
    if (col("preemptions") < 0).any():
        problems.append(f"{name}: negative preemptions")
    # disaggregated milestones, in the order they happen (NaN where never reached); a layerwise
    # handoff starts while the prompt is still being computed, a whole one after it
    pairs = [("admit_s", "prefill_end_s"), ("admit_s", "handoff_start_s"), ("handoff_start_s", "handoff_landed_s"),
             ("handoff_landed_s", "handoff_end_s"), ("prefill_end_s", "handoff_end_s")]
    if spec.systems[name].kv_handoff.mode == "whole":
        pairs.append(("prefill_end_s", "handoff_start_s"))
    for a, b in pairs:
        _ordered(problems, name, col(a), col(b), f"{b} before {a}")
    _ordered(problems, name, col("handoff_end_s"), col("decode_start_s"), "decode_start_s before handoff_end_s")
    _ordered(problems, name, col("decode_start_s"), first, "first token before decode_start_s")
    # cache columns: every admission's prompt tokens come from some tier or are computed
    hits = sum(col(f"hit_tokens_{t}") for t in ("hbm", "dram", "nvme", "remote", "peer_hbm", "other_domain"))
    if (hits < 0).any() or (col("computed_tokens") < 0).any() or (col("loaded_bytes") < 0).any():
        problems.append(f"{name}: negative hit, computed or loaded figures")
    prompt_done = done & (col("preemptions") == 0)
    short = prompt_done & (hits + col("computed_tokens") < col("input_tokens"))
    if short.any():
        k = int(np.flatnonzero(short)[0])
        problems.append(f"{name}: request {k} finished with {int(hits[k] + col('computed_tokens')[k])} prompt tokens "
                        f"hit or computed, of {int(col('input_tokens')[k])}")


def _summary(problems: list[str], name: str, run, spec) -> None:
    r, s = run.records, run.summary
    start, end = s["window"]["start_s"], s["window"]["end_s"]
    arrival, finish, aborted = r.column("arrival_s"), r.column("finish_s"), r.column("aborted_s")
    arrived = arrival >= start
    done, gone, refused = ~np.isnan(finish), ~np.isnan(aborted), ~np.isnan(r.column("rejected_s"))
    expected = {
        "requests_arrived": int(arrived.sum()),
        "requests_completed": int((done & (finish >= start) & (finish <= end)).sum()),
        "requests_aborted": int((arrived & gone).sum()),
        "requests_rejected": int((arrived & refused).sum()),
        "requests_undrained": int((arrived & ~done & ~gone & ~refused).sum()),
        "requests_unfinished": int((arrived & ~refused & ~(finish <= end)).sum()),
    }
    for key, value in expected.items():
        if s[key] != value:
            problems.append(f"{name}: summary {key} = {s[key]}, the records say {value}")
    if s["requests_completed"] > s["requests_arrived"] + int((done & ~arrived & (finish >= start)).sum()):
        problems.append(f"{name}: more completions than requests")
    for key in ("kv_utilization_mean", "kv_utilization_peak", "gpu_busy_fraction"):
        value = s[key]
        if not (value == value) and key != "kv_utilization_peak":
            problems.append(f"{name}: {key} is NaN")
        elif value == value and not -1e-12 <= value <= 1 + 1e-12:
            problems.append(f"{name}: {key} = {value} outside [0, 1]")
    cache = s.get("cache")
    if cache is not None:
        for tier, rate in cache["hit_rate"].items():
            if not -1e-12 <= rate <= 1 + 1e-9:
                problems.append(f"{name}: hit rate {tier} = {rate} outside [0, 1]")
    routing = s.get("routing", {})
    for key in ("token_hit_rate", "token_hit_rate_infinite_cache"):
        value = routing.get(key, 0.0)
        if not -1e-12 <= value <= 1 + 1e-9:
            problems.append(f"{name}: routing {key} = {value} outside [0, 1]")


def _tokens(problems: list[str], name: str, run, system) -> None:
    """Output tokens emitted equal those requested: all of them for every finished request, some
    for aborted or undrained ones; each prompt counted once (recomputation included)."""
    r = run.records
    done = ~np.isnan(r.column("finish_s"))
    out, inputs = r.column("output_tokens"), r.column("input_tokens")
    emitted, prompts = system.counters.output_tokens.total, system.counters.input_tokens.total
    floor, ceiling = int(out[done].sum()), int(out.sum())
    if not floor <= emitted <= ceiling:
        problems.append(f"{name}: {emitted} output tokens emitted; the finished requests asked for {floor} "
                        f"and all requests for {ceiling}")
    if done.all() and emitted != ceiling:
        problems.append(f"{name}: every request finished but {emitted} output tokens were emitted of {ceiling}")
    if not int(inputs[done].sum()) <= prompts <= int(inputs.sum()):
        problems.append(f"{name}: {prompts} prompt tokens counted; finished requests have {int(inputs[done].sum())}, "
                        f"all {int(inputs.sum())}")


def _littles_law(problems: list[str], name: str, run) -> None:
    """Little's law on the sample path, exact: the engine's own time-average of the number in the
    system over the window ``[a, b]`` times its length equals the request-seconds the records put
    inside it, ``L (b - a) = lambda W (b - a) + A_in - A_out`` where ``lambda W (b - a)`` is the
    time in system of the requests arriving in the window, ``A_in`` the time requests that arrived
    before ``a`` spent inside it and ``A_out`` the time window arrivals spent after ``b``. The edge
    terms are computed, not bounded, so the tolerance is only float rounding (``RTOL``); over the
    whole run, once drained, the edge terms vanish and ``L = lambda W``."""
    r = run.records
    start, end = run.summary["window"]["start_s"], run.summary["window"]["end_s"]
    arrival, ends = r.column("arrival_s"), request_ends_s(r)
    span = end - start
    engine = run.in_system_mean * span
    area = np.diff(in_system_integral(arrival, ends, np.array([start, end])))[0]
    inside = (arrival >= start) & (arrival <= end)
    stay = np.minimum(ends, end) - arrival  # inf ends (undrained) are clipped at the window's end
    lam_w = float(np.sum(np.where(inside, stay, 0.0)))
    before = arrival < start
    a_in = float(np.sum(np.clip(np.minimum(ends[before], end) - start, 0.0, None)))
    scale = max(1.0, abs(engine), lam_w + a_in)
    if not math.isclose(engine, area, rel_tol=RTOL, abs_tol=RTOL * scale):
        problems.append(f"{name}: the engine's number in system integrates to {engine!r} request-s over the "
                        f"window, the records' to {area!r}")
    if not math.isclose(area, lam_w + a_in, rel_tol=RTOL, abs_tol=RTOL * scale):
        problems.append(f"{name}: Little's law: L*T = {area!r} but lambda*W*T + A_in - A_out = {lam_w + a_in!r}")
    finite = np.isfinite(ends)
    if finite.all() and r.n:
        horizon = float(ends.max())
        whole = float(in_system_integral(arrival, ends, np.array([horizon]))[0])
        total = float(np.sum(ends - arrival))
        if not math.isclose(whole, total, rel_tol=RTOL, abs_tol=RTOL * max(1.0, total)):
            problems.append(f"{name}: over the whole run L*T = {whole!r} but lambda*W*T = {total!r}")


def _kv(problems: list[str], name: str, run, watch: SystemWatch, drained: bool) -> None:
    """Occupancy within capacity (pages, stores, sampled tiers), the index agreeing with the
    stores, and reads below HBM only of blocks put there."""
    system = watch.system
    for inst in system.instances:
        pool = inst.pool
        if not 0 <= pool.used_blocks <= pool.num_blocks:
            problems.append(f"{name}: instance {inst.index} holds {pool.used_blocks} of {pool.num_blocks} pages")
        if drained and system.cache is None and inst.adapters is None and pool.used_blocks:
            problems.append(f"{name}: instance {inst.index} still holds {pool.used_blocks} pages after the drain")
    cache = system.cache
    if cache is None:
        return
    stores = {"hbm": list(cache.hbm), "dram": list(cache.dram.values()), "nvme": list(cache.nvme.values()),
              "remote": list(cache.remote)}
    held: dict[int, int] = {}
    if cache.extents:  # per stretch of a chain: (starts, ends, location tuples)
        for stretches in cache.index._maps.values():
            for start, end, where in zip(stretches.starts, stretches.ends, stretches.values):
                for store in where:
                    held[id(store)] = held.get(id(store), 0) + end - start
    else:
        for _block, where in cache.index._where.items():
            for store in where:
                held[id(store)] = held.get(id(store), 0) + 1
    capacity = {}
    for tier, group in stores.items():
        capacity[tier] = sum(s.capacity_bytes for s in group)
        for store in group:
            if store.used_blocks > store.capacity_blocks:
                problems.append(f"{name}: store {store.name} holds {store.used_blocks} of {store.capacity_blocks} blocks")
            if held.get(id(store), 0) != store.used_blocks:
                problems.append(f"{name}: the index lists {held.get(id(store), 0)} blocks in {store.name}, "
                                f"which holds {store.used_blocks}")
    for row in run.timeseries:
        for tier in stores:
            if row[f"{tier}_bytes"] > capacity[tier] * (1 + RTOL):
                problems.append(f"{name}: {tier} held {row[f'{tier}_bytes']:.6g} bytes at {row['time_s']:.6g} s, "
                                f"capacity {capacity[tier]:.6g}")
                break
    # reads below HBM: each of a block that was put in that store and is there when read
    present = {sid: set(blocks) for sid, blocks in watch.initial.items()}
    read: dict[str, set] = {tier: set() for tier in LOWER_TIERS}
    reads = dict.fromkeys(LOWER_TIERS, 0)  # blocks read in the window (where loads are counted)
    window = cache.window
    for kind, sid, block, hit, when in watch.events:
        if kind == "put":
            present[sid].add(block)
            continue
        tier = watch.tiers[sid]
        reads[tier] += window[0] <= when <= window[1]
        if not hit or block not in present[sid]:
            problems.append(f"{name}: a block read from {tier} that was {'not there' if not hit else 'never put there'}")
            break
        read[tier].add((sid, block))
    # swaps: a sequence swapped in takes back exactly the bytes its swap-out put in DRAM
    out_bytes: dict[int, float] = {}
    swapped_in = swapped_out = 0.0
    for direction, rid, nbytes, when in watch.swaps:
        if direction == "out":
            swapped_out += nbytes if window[0] <= when <= window[1] else 0.0
            if rid in out_bytes:
                problems.append(f"{name}: request {rid} swapped out twice without a swap-in")
            out_bytes[rid] = nbytes
            continue
        put = out_bytes.pop(rid, None)
        if put is None or put != nbytes:
            problems.append(f"{name}: request {rid} swapped in {nbytes:.6g} bytes; its swap-out put {put} there")
        swapped_in += nbytes if window[0] <= when <= window[1] else 0.0
    s_cache = run.summary["cache"]
    g = cache.geometry
    for tier in LOWER_TIERS:
        put = sum(s.insertions for s in stores[tier])
        if len(read[tier]) > put:
            problems.append(f"{name}: {len(read[tier])} distinct blocks read from {tier}, {put} ever put there")
        loaded = s_cache["bytes_loaded"].get(tier, 0.0)
        moved = reads[tier] * g.block_bytes_per_card * g.tp + (swapped_in if tier == "dram" else 0.0)
        if not math.isclose(loaded, moved, rel_tol=RTOL):
            problems.append(f"{name}: {loaded:.6g} bytes counted as loaded from {tier} in the window, but "
                            f"{reads[tier]} blocks of {g.block_bytes_per_card * g.tp:.6g} bytes were read there"
                            + (f" and {swapped_in:.6g} bytes swapped in" if tier == "dram" else ""))
        written = s_cache["bytes_written"].get(tier, 0.0)
        if not stores[tier] and not math.isclose(written, swapped_out if tier == "dram" else 0.0, rel_tol=RTOL):
            problems.append(f"{name}: {written:.6g} bytes written to {tier}, which this system has no cache tier in"
                            + (f" (swapped out: {swapped_out:.6g})" if tier == "dram" else ""))


def violations(observed: Observed, scenario: kvsim.Scenario, timeout_s: float | None) -> list[str]:
    """Every invariant the observed run breaks, one line each (empty: all hold)."""
    problems: list[str] = []
    result = observed.result
    spec = scenario.spec
    streams = None
    workload = spec.workload
    if not workload.closed_loop and not workload.multi_turn:
        streams = open_loop_requests(workload, spec.duration, RandomStreams(result.runs[0].seed))
    for run in result.runs:
        name = run.system
        watch = observed.watches[name]
        r = run.records
        if streams is not None:  # every drawn request arrived once, as drawn
            same = (r.n == len(streams) and np.array_equal(r.column("arrival_s"), streams.arrival_s)
                    and np.array_equal(r.column("input_tokens"), streams.input_tokens)
                    and np.array_equal(r.column("output_tokens"), streams.output_tokens))
            if not same:
                problems.append(f"{name}: {r.n} requests recorded, not the {len(streams)} drawn (or not as drawn)")
        finishes = watch.finishes
        done = ~np.isnan(r.column("finish_s"))
        twice = [rid for rid, count in finishes.items() if count > 1]
        if twice:
            problems.append(f"{name}: {len(twice)} requests finished more than once (request {twice[0]})")
        if set(finishes) != set(np.flatnonzero(done).tolist()):
            problems.append(f"{name}: {len(finishes)} requests reached their clients, {int(done.sum())} have a finish time")
        left = int((~done & np.isnan(r.column("aborted_s")) & np.isnan(r.column("rejected_s"))).sum())
        if watch.system.in_system.value != left:
            problems.append(f"{name}: the engine counts {watch.system.in_system.value} requests in the system at "
                            f"the end, the records {left}")
        drained = watch.system.in_system.value == 0
        spins = {key: n for key, n in watch.preemptions.items() if n > 1}
        if spins:  # vLLM preempts in forming a step; a request preempted again waits for the next one
            (_, rid, formed), most = max(spins.items(), key=lambda kv: kv[1])
            problems.append(f"{name}: request {rid} preempted {most} times with no batch formed in between "
                            f"(its instance at batch {formed}); {len(spins)} such cases")
        _records(problems, name, run, spec, timeout_s)
        _summary(problems, name, run, spec)
        _tokens(problems, name, run, watch.system)
        _littles_law(problems, name, run)  # colocated, disaggregated, with a controller: every run
        _kv(problems, name, run, watch, drained)
        if watch.system.handoff is not None:
            handoff_problems(problems, name, run, watch.system, spec, RTOL)
        if watch.system.controller is not None:
            controller_problems(problems, name, run, spec, len(watch.system.instances), RTOL)
    return problems


def effects(observed: Observed) -> set[str]:
    """What actually happened in the run (not only what the scenario asked for): preemptions,
    swaps, aborts, undrained requests, reads from each lower tier, P->D handoffs, role switches,
    hits in a peer's HBM and in another domain's, layout searches, requests still queued when
    arrivals stopped."""
    seen = set()
    for run in observed.result.runs:
        r = run.records
        col = r.column
        watch = observed.watches[run.system]
        checks = {
            "preempted": col("preemptions").sum() > 0,
            "aborted": (~np.isnan(col("aborted_s"))).any(),
            "undrained": run.summary["requests_undrained"] > 0,
            "backlog_at_end": run.summary["requests_unfinished"] > 0,
            "handoff": (col("handoff_bytes") > 0).any(),
            "role_switch": bool(run.switches),
            "kv_migrated": any(sw.get("migrated_requests", 0) > 0 for sw in run.switches),
            "hit_hbm": (col("hit_tokens_hbm") > 0).any(),
            "hit_peer": (col("hit_tokens_peer_hbm") > 0).any(),
            "hit_other_domain": (col("hit_tokens_other_domain") > 0).any(),
            "layout_searched": "layout_search" in run.summary,
            "swapped": watch.system.transfers.bytes_by_purpose.get("swap", 0.0) > 0,
        }
        seen.update(k for k, v in checks.items() if v)
        seen.update(f"read_{watch.tiers[e[1]]}" for e in watch.events if e[0] == "read")
    return seen
