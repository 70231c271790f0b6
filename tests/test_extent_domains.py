"""Domains kept as extents give the records of domains kept per block (issue 23, item 1).

A ``shared_documents`` system that shares each addressing domain's HBM in place keeps its
domain stores, homes, blocks in flight, cluster index and the router's view as extents
(:mod:`kvsim.serving.cache.extent_pool`, :mod:`kvsim.serving.cache.extent_cache`). Every case
here runs twice, once so and once with ``KV_EXTENTS`` off (every structure per block: the
reference), and the request records (bit for bit), every run's summary and time series must be
the same: domains under pressure (evictions, moves between cards, preemptions), several domains
(loads copied from another domain), every router, a delayed router view, both load modes and
policies, closed loops, and random domain scenarios drawn from a seed.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import kvsim
from kvsim.sim import build
from test_domains import PRESSURE


def _summaries(result: kvsim.RunResult) -> str:
    """Every run's summary and time series as one JSON text (NaN written as such)."""
    def clean(value):
        if isinstance(value, float) and math.isnan(value):
            return "nan"
        if isinstance(value, dict):
            return {str(k): clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        if isinstance(value, np.generic):
            return clean(value.item())
        return value
    return json.dumps([clean({"summary": r.summary, "timeseries": r.timeseries}) for r in result.runs],
                      sort_keys=True, default=str)


def _both(scenario: kvsim.Scenario, monkeypatch, used: bool = True) -> tuple:
    """Run ``scenario`` with domains as extents and per block; returns both results."""
    built = []
    real_build = build.build_system

    def capture(*args, **kwargs):
        built.append(real_build(*args, **kwargs))
        return built[-1]

    import kvsim.sim.run as run_module

    monkeypatch.setattr(run_module, "build_system", capture)
    monkeypatch.setattr(build, "KV_EXTENTS", True)
    extents = kvsim.run(scenario)
    assert any(s.cache is not None and s.cache.extents for s in built) == used
    monkeypatch.setattr(build, "KV_EXTENTS", False)
    blocks = kvsim.run(scenario)
    return extents, blocks


def _same(scenario: kvsim.Scenario, monkeypatch) -> kvsim.RunResult:
    extents, blocks = _both(scenario, monkeypatch)
    assert extents.records_digest() == blocks.records_digest()
    assert _summaries(extents) == _summaries(blocks)
    return extents


def test_a_domain_under_pressure(monkeypatch):
    result = _same(kvsim.parse_scenario(PRESSURE, "p.yaml"), monkeypatch)
    run = result.runs[0]
    domains = run.summary["cache"]["domains"]
    # pressure reached: blocks moved between cards and left the domain, requests were preempted
    assert domains["moved_bytes"] > 0 and run.records.column("preemptions").sum() > 0
    assert domains["hit_tokens_by_source"]["peer_hbm"] > 0


SEVERAL = PRESSURE.replace(
    "s: {node: h20-8x, kv_cache: {peer_hbm: read_in_place}, instance: {memory_utilization: 0.2}}",
    "s: {node: h20-8x, nodes: 2, kv_cache: {peer_hbm: read_in_place%s}, instance: {memory_utilization: 0.2}%s}")


@pytest.mark.parametrize("cache, system", [
    ("", ", router: cache_aware"),
    (", load_mode: before", ", router: cache_aware, cache_aware: {staleness: 0.05 s}"),
    (", load_policy: faster", ", router: prefix_aware"),
    ("", ", router: round_robin, scale_up_domain_nodes: 2"),
    (", load_mode: before", ", router: least_outstanding"),
], ids=["cache_aware", "stale_view", "faster_prefix_aware", "one_domain_of_two_nodes", "before_least_outstanding"])
def test_two_domains(cache, system, monkeypatch):
    text = (SEVERAL % (cache, system)).replace("duration: 6 s", "duration: 4 s")
    result = _same(kvsim.parse_scenario(text, "two.yaml"), monkeypatch)
    hits = result.runs[0].summary["cache"]["domains"]["hit_tokens_by_source"]
    if "least_outstanding" in system:  # (a router blind to the cache sends some to the other domain)
        assert hits["other_domain"] > 0
    assert hits["peer_hbm"] > 0


def test_the_domains_speed_case(monkeypatch):
    import sys
    from pathlib import Path

    bench = str(Path(__file__).resolve().parent.parent / "benchmarks")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    import speed_cases

    _same(speed_cases.scenario_for("domains", {"scale": 0.02}), monkeypatch)


def test_systems_outside_the_extents_stay_per_block(monkeypatch):
    """A trace workload, a DRAM tier and a copy-in peer are kept per block (and run the same)."""
    text = PRESSURE.replace("kv_cache: {peer_hbm: read_in_place}", "kv_cache: {peer_hbm: read_in_place, dram: {capacity: 64 GiB}}")
    extents, blocks = _both(kvsim.parse_scenario(text.replace("duration: 6 s", "duration: 2 s"), "d.yaml"),
                            monkeypatch, used=False)
    assert extents.records_digest() == blocks.records_digest()


def _random_domain_scenario(seed: int) -> kvsim.Scenario:
    """A small random read-in-place scenario of shared documents (the systems extents keep), its
    HBM as small as the validator allows (a draw it refuses gets more memory)."""
    return first_valid(_domain_text, seed, "domain")


def first_valid(text_of, seed: int, kind: str) -> kvsim.Scenario:
    """The first scenario ``text_of(seed, extra_memory)`` gives that the validator accepts, with
    0, 0.02, ... 0.14 of extra memory: the memory as small as the validator allows."""
    for extra in range(8):
        try:
            scenario = kvsim.parse_scenario(text_of(seed, 0.02 * extra), f"random-{kind}-{seed}.yaml")
            kvsim.check(scenario)
            return scenario
        except kvsim.SpecError:
            continue
    raise AssertionError(f"no valid random {kind} scenario for seed {seed}")


def _domain_text(seed: int, extra_memory: float) -> str:
    rng = np.random.default_rng(seed)
    block = int(rng.choice([16, 32, 64]))
    doc_median = int(rng.choice([1500, 3000, 5000]))
    nodes = int(rng.choice([1, 2, 4]))
    per_domain = int(rng.choice([n for n in (1, 2, 4) if n <= nodes and nodes % n == 0]))
    tp = int(rng.choice([1, 1, 2]))
    model = str(rng.choice(["qwen3-1.7b", "qwen3-8b"]))
    # the least memory that holds the weights, plus a little KV: domains under pressure
    least = {("qwen3-1.7b", 1): 0.06, ("qwen3-1.7b", 2): 0.045, ("qwen3-8b", 1): 0.19, ("qwen3-8b", 2): 0.11}
    memory = round(least[(model, tp)] + float(rng.choice([0.01, 0.03, 0.08])) + extra_memory, 3)
    router = str(rng.choice(["cache_aware", "cache_aware", "prefix_aware", "round_robin", "least_outstanding"]))
    stale = f", cache_aware: {{staleness: {float(rng.choice([0.02, 0.2]))} s}}" if router == "cache_aware" and \
        rng.random() < 0.4 else ""
    mode = str(rng.choice(["overlap", "before"]))
    policy = str(rng.choice(["always", "faster"]))
    closed = rng.random() < 0.3
    arrival = (f"{{kind: closed_loop, clients: {int(rng.integers(8, 48))}, think_time: 0.2 s}}" if closed else
               f"{{kind: poisson, rate: {int(rng.integers(10, 60))}/s}}")
    return f"""
name: random-domain-{seed}
seed: {seed}
duration: {float(rng.choice([3.0, 4.0, 6.0]))} s
warmup: 0.5 s
model: {model}
workload:
  arrival: {arrival}
  block_tokens: {block}
  prefix: {{kind: shared_documents, documents: {int(rng.integers(3, 300))}, zipf_s: {float(rng.choice([0.0, 0.6, 1.2]))},
           document_tokens: {{kind: lognormal, median: {doc_median}, sigma: 0.6, max: {2 * doc_median}}},
           suffix_tokens: {{kind: uniform, low: 1, high: {int(rng.integers(1, 600))}}}}}
  output_tokens: {{kind: lognormal, median: {int(rng.integers(20, 300))}, sigma: 0.5, max: 800}}
systems:
  s: {{node: h20-8x, nodes: {nodes}, scale_up_domain_nodes: {per_domain}, router: {router}{stale},
      instance: {{tp: {tp}, memory_utilization: {memory}}},
      kv_cache: {{peer_hbm: read_in_place, load_mode: {mode}, load_policy: {policy}}}}}
"""


RANDOM_CASES = 60


@pytest.mark.parametrize("seed", range(RANDOM_CASES))
def test_random_domain_scenarios(seed, monkeypatch):
    _same(_random_domain_scenario(seed), monkeypatch)


def test_the_random_domain_scenarios_reach_pressure(built_systems):
    """The random cases above are not all easy: some move blocks between cards, evict, preempt
    and copy from another domain (counted on the extents' runs of the first 40)."""
    seen = {"moved": 0, "evicted": 0, "preempted": 0, "other_domain": 0}
    for seed in range(40):
        run = kvsim.run(_random_domain_scenario(seed)).runs[0]
        domains = run.summary["cache"]["domains"]
        assert built_systems[-1].cache.extents
        seen["moved"] += domains["moved_bytes"] > 0
        seen["evicted"] += sum(p.store.evictions for p in built_systems[-1].cache.domain_pools.values()) > 0
        seen["preempted"] += run.records.column("preemptions").sum() > 0
        seen["other_domain"] += domains["hit_tokens_by_source"]["other_domain"] > 0
    assert min(seen.values()) >= 5, seen


LANDING = """
name: landing
duration: 10 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 1/s}
  block_tokens: 16
  prefix: {kind: shared_documents, documents: 4, zipf_s: 1.0, document_tokens: {kind: fixed, value: 1600},
           suffix_tokens: {kind: fixed, value: 64}}
  output_tokens: {kind: fixed, value: 10}
systems:
  s: {node: h20-8x, nodes: 2, kv_cache: {peer_hbm: read_in_place, load_mode: before}}
"""


def _copy_waiting_for_a_move(monkeypatch, extents: bool) -> tuple[float, float]:
    """Domain su1 files a document on one card and moves it to its peers (reclaim: the copies are
    in flight); meanwhile an instance of domain su0 admits a prompt of that document, so its copy
    from su1 must wait for the move to land. Returns (the move's landing time, the copy's)."""
    import simpy

    from kvsim.metrics.records import RequestRecords
    from kvsim.rng import RandomStreams
    from kvsim.serving.cache.prefix_loader import PrefixLoader
    from kvsim.sim import check_scenario
    from kvsim.workload.reuse import DocumentLibrary

    monkeypatch.setattr(build, "KV_EXTENTS", extents)
    scenario = kvsim.parse_scenario(LANDING, "landing.yaml")
    env = simpy.Environment()
    system = build.build_system(env, scenario.points[0].spec, check_scenario(scenario)[(0, "s")],
                                RequestRecords(), RandomStreams(0), 16)
    assert system.cache.extents == extents
    library = DocumentLibrary(scenario.points[0].spec.workload.prefix, 16, RandomStreams(0).generator("docs"))
    _, ids = library.prompt(0, 64, ("landing", 0))
    doc = 1600 // 16
    holder_pool = system.cache.domain_pools["su1"]
    holder = holder_pool.members[0]
    # the document computed on su1's first card: filed in its store, homed there, on its pages
    assert holder.pool.take(doc)
    if extents:
        seq0 = system.kernels.sequence.Sequence(0, 1664, 10, hashes=ids)
        from kvsim.serving.cache.segments import prompt_address

        chain, start, end = prompt_address(seq0, 16)[0]
        assert (start, end) == (0, doc)
        system.cache.index.insert_run(holder_pool.store, chain, 0, doc)
        holder_pool.homed_run(chain, 0, doc, holder)
    else:
        blocks = ids[:doc].tolist()
        system.cache.index.insert_run(holder_pool.store, blocks)
        holder_pool.homed_run(blocks, holder)
    # the card runs short: its unheld cached blocks move to a peer (in flight from now)
    assert holder.pool.take(holder.pool.free_blocks)
    holder_pool.reclaim(holder, 1)
    assert holder_pool.moves == doc
    # (to its peers in chunks: one move, and event, per peer)
    moves = holder_pool.inflight.events(chain, 0, doc) if extents else list(
        {id(e): e for e in (holder_pool.inflight[b] for b in blocks)}.values())
    assert len(moves) > 1
    # an instance of su0 admits a prompt of the document: it copies the blocks in from su1
    reader = system.cache.domain_pools["su0"].members[0]
    waits = []
    monkeypatch.setattr(PrefixLoader, "_wait", lambda self, seq, state, w: waits.extend(w) or "load")
    seq = system.kernels.sequence.Sequence(1, 1664, 10, hashes=ids)
    assert reader.loader.admit(seq) == "load"
    assert seq.cache.hits.get("other_domain") == doc * 16
    (copy,) = waits
    landed = []
    for move in moves:
        move.callbacks.append(lambda _event: landed.append(env.now))
    env.run(copy)
    assert len(landed) == len(moves)
    return max(landed), env.now


def test_a_copy_from_another_domain_waits_for_blocks_still_moving_there(monkeypatch):
    """The copy starts only when the move has landed (it would take as long again), and the
    extents and the per-block reference agree on both times to the bit."""
    move_s, copy_s = _copy_waiting_for_a_move(monkeypatch, True)
    assert 0.0 < move_s < copy_s and copy_s - move_s > 0.5 * move_s
    assert _copy_waiting_for_a_move(monkeypatch, False) == (move_s, copy_s)


POOL = """
name: pool
duration: 10 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 1/s}
  block_tokens: 16
  prefix: {kind: shared_documents, documents: 6, zipf_s: 1.0, document_tokens: {kind: fixed, value: 640},
           suffix_tokens: {kind: fixed, value: 32}}
  output_tokens: {kind: fixed, value: 10}
systems:
  s: {node: h20-8x, kv_cache: {peer_hbm: read_in_place}, instance: {block_size_tokens: %d}}
"""


class _Keeping:
    """One built domain (8 cards, one store) kept per block or as extents, driven by the calls
    the cache layer makes, and its state read as blocks (ids) for comparison."""

    def __init__(self, extents: bool, page_tokens: int, cache_blocks: int, monkeypatch):
        import simpy

        from kvsim.metrics.records import RequestRecords
        from kvsim.rng import RandomStreams
        from kvsim.sim import check_scenario
        from kvsim.workload.reuse import DocumentLibrary

        monkeypatch.setattr(build, "KV_EXTENTS", extents)
        scenario = kvsim.parse_scenario(POOL % page_tokens, "pool.yaml")
        self.env = simpy.Environment()
        self.system = build.build_system(self.env, scenario.points[0].spec, check_scenario(scenario)[(0, "s")],
                                         RequestRecords(), RandomStreams(0), 16)
        self.extents = extents
        (self.pool,) = self.system.cache.domain_pools.values()
        self.members = self.pool.members
        self.ppb = self.members[0].geometry.pages_per_block
        for member in self.members:  # each card left with room for ``cache_blocks`` blocks
            assert member.pool.take(member.pool.free_blocks - cache_blocks * self.ppb)
        library = DocumentLibrary(scenario.points[0].spec.workload.prefix, 16, RandomStreams(0).generator("d"))
        self.docs = [library.prompt(d, 32, ("pool", d))[1][:40] for d in range(6)]  # 40 full blocks each
        self.key = {int(ids[0]): ids for ids in self.docs}
        self.held: dict[int, int] = {}  # pages taken by hand per member (as sequences would)

    def _stretch(self, d: int, start: int, end: int):
        return (int(self.docs[d][0]), start, end) if self.extents else self.docs[d][start:end].tolist()

    def file(self, m: int, d: int, start: int, end: int) -> bool:
        """Member ``m`` computed blocks ``[start, end)`` of document ``d`` (its pages taken,
        reclaiming if short) and files the ones not stored yet in the domain."""
        store, index, member = self.pool.store, self.system.cache.index, self.members[m]
        ids = self.docs[d][start:end].tolist()
        if self.extents:
            chain = int(self.docs[d][0])
            new = [(s, e) for s, e in store.missing(chain, start, end)]
            count = sum(e - s for s, e in new)
        else:
            count = len(store.missing(ids))
        if not count or not member.pool.take(count * self.ppb):
            return False
        # (taking the pages may have reclaimed, evicting some of these very blocks: then give
        # the pages back and file nothing, alike both ways)
        if self.extents:
            new = [(s, e) for s, e in store.missing(chain, start, end)]
            if sum(e - s for s, e in new) != count:
                member.pool.give(count * self.ppb)
                return False
            for s, e in new:
                index.insert_run(store, chain, s, e)
                self.pool.homed_run(chain, s, e, member)
        else:
            missing = store.missing(ids)
            if len(missing) != count:
                member.pool.give(count * self.ppb)
                return False
            index.insert_run(store, missing)
            self.pool.homed_run(missing, member)
        return True

    def stored(self, d: int, start: int, end: int) -> bool:
        """Blocks ``[start, end)`` of document ``d`` are all in the domain's store."""
        if self.extents:
            return not self.pool.store.missing(int(self.docs[d][0]), start, end)
        return not self.pool.store.missing(self.docs[d][start:end].tolist())

    def read(self, d: int, start: int, end: int) -> None:
        if self.extents:
            self.pool.store.read_run(*self._stretch(d, start, end))
        else:
            self.pool.store.read_run(self._stretch(d, start, end))

    def release(self, d: int, start: int, end: int) -> None:
        if self.extents:
            self.pool.store.drop_reader_each(*self._stretch(d, start, end))
        else:
            self.pool.store.drop_reader_each(self._stretch(d, start, end))

    def grow(self, m: int, pages: int) -> bool:
        """A sequence of member ``m`` takes ``pages`` (reclaiming cached blocks if short)."""
        member = self.members[m]
        if member.pool.take(pages):
            self.held[m] = self.held.get(m, 0) + pages
            return True
        return False

    def shrink(self, m: int) -> None:
        self.members[m].pool.give(self.held.pop(m, 0))

    def state(self) -> tuple:
        """Every member's homed blocks in order and free pages, the store's blocks least recent
        first with their readers and pins, the blocks in flight, moves and evictions."""
        ids = lambda chain, pos: int(self.key[chain][pos])  # noqa: E731
        store = self.pool.store
        if self.extents:
            homes = [[ids(c, p) for c, p in self.pool.homes.order(m)] for m in self.members]
            order = [(ids(e.chain, p), e.readers, e.pins) for e in store.extents() for p in range(e.start, e.end)]
            flying = sorted(ids(c, p) for c, m in self.pool.inflight._maps.items()
                            for s, e, v in zip(m.starts, m.ends, m.values) for p in range(s, e) if v is not None)
        else:
            homes = [list(self.pool.resident[id(m)]) for m in self.members]
            order = [(b, store.readers(b), store.pins(b)) for b in store._policy.in_order()]
            flying = sorted(self.pool.inflight)
        return (homes, [m.pool.free_blocks for m in self.members], order, flying, self.pool.moves, store.evictions)


@pytest.mark.parametrize("seed", range(30))
def test_the_two_keepings_of_a_domain_pool_agree_call_by_call(seed, monkeypatch):
    """Filing, reads, releases, sequences growing and shrinking (reclaim: moves in chunks to the
    peers with room, evictions, then moves into the room the victims left), moves landing:
    after every call the per-block pool and the extents hold the same blocks, homes in the same
    orders, pages, readers, pins, blocks in flight, moves and evictions."""
    rng = np.random.default_rng(seed)
    page_tokens = int(rng.choice([16, 8]))  # one or two pages a block
    cache_blocks = int(rng.integers(30, 90))
    ops = []
    for _ in range(250):
        kind = rng.choice(["file", "file", "read", "release", "grow", "grow", "shrink", "land"])
        d = int(rng.integers(0, 6))
        start = int(rng.integers(0, 40))
        end = int(min(40, start + rng.integers(1, 40)))
        ops.append((kind, int(rng.integers(0, 8)), d, start, end, int(rng.integers(1, 120))))
    runs = []
    for extents in (True, False):
        keeping = _Keeping(extents, page_tokens, cache_blocks, monkeypatch)
        states, reading = [], []
        for kind, m, d, start, end, pages in ops:
            if kind == "file":
                keeping.file(m, d, 0, end)  # a prompt's blocks from its start
            elif kind == "read" and keeping.stored(d, start, end):  # (any stretch: mixed recency)
                keeping.read(d, start, end)
                reading.append((d, start, end))
            elif kind == "release" and reading:
                keeping.release(*reading.pop(int(pages) % len(reading)))
            elif kind == "grow":
                keeping.grow(m, pages * keeping.ppb)
            elif kind == "shrink":
                keeping.shrink(m)
            elif kind == "land":
                keeping.env.run(keeping.env.now + 1e-4 * pages)
            states.append(keeping.state())
        runs.append(states)
    assert runs[0] == runs[1]
    moves, evictions = runs[0][-1][4], runs[0][-1][5]
    assert moves > 0 or evictions > 0  # (reclaim was reached)


def _victims_inside_a_cards_order(keeping: _Keeping) -> list:
    """Reclaim's victims falling in the middle of a card's order (in a stretch it received
    backwards), and then the peer that lost a victim taking the card's most recent blocks."""
    a, b, c = 0, 1, 2
    for m, member in enumerate(keeping.members):  # room only where the script says
        member.pool.take(member.pool.free_blocks - (10 if m == b else 8 if m in (a, c) else 0) * keeping.ppb)
    assert keeping.file(c, 0, 0, 5)       # document 0's blocks 0-4 on card c: oldest in the store
    assert keeping.file(a, 0, 5, 8)       # 5-7 on card a
    assert keeping.file(c, 1, 0, 3)       # document 1's blocks 0-2 on card c
    assert keeping.file(a, 0, 8, 10)      # 8-9 on card a
    keeping.read(0, 0, 5)                 # a hit on 0-4: the newest in the store now
    keeping.release(0, 0, 5)
    for m in (a, c):  # a, then c, runs short: its blocks move to b, the one card with room
        assert keeping.grow(m, keeping.members[m].pool.free_blocks + keeping.ppb)
        keeping.members[m].pool.take(keeping.members[m].pool.free_blocks)
    keeping.env.run()                     # both moves to card b land: its order 9 .. 5, 4 .. 0
    for m in range(len(keeping.members)):
        keeping.members[m].pool.take(keeping.members[m].pool.free_blocks)
    # card b needs 5 blocks' pages: victims 5, 6, 7 (its own) and document 1's 0-1 (card c's);
    # c's room then takes b's most recent blocks, 0 and 1
    assert keeping.grow(b, 5 * keeping.ppb)
    return keeping.state()


def test_victims_inside_a_cards_order_leave_its_newest_blocks_to_move(monkeypatch):
    """Card b holds document 0's blocks 9 .. 0 (moved in from a and c, most recent first); the
    domain's oldest blocks are 5-7 (b's) and document 1's 0-1 (c's): evicted, they leave b with
    9, 8, 4 .. 0 and c with room for two, which b's newest, 0 and 1, take. Both keepings agree."""
    extents, blocks = (_victims_inside_a_cards_order(_Keeping(e, 16, 40, monkeypatch)) for e in (True, False))
    assert extents == blocks
    homes, _, _, _, moves, evictions = blocks
    keeping = _Keeping(False, 16, 40, monkeypatch)
    doc = [int(x) for x in keeping.docs[0][:10]]
    assert evictions == 5 and moves == 10 + 2
    assert homes[1] == [doc[9], doc[8], doc[4], doc[3], doc[2]] and homes[2][-2:] == [doc[0], doc[1]]


ELIGIBLE = """
name: eligible
duration: 10 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 1/s}
  prefix: %s
  output_tokens: {kind: fixed, value: 10}%s
systems:
  s: {node: h20-8x, nodes: 2, kv_cache: {peer_hbm: read_in_place%s}%s}
"""
DOCUMENTS = ("{kind: shared_documents, documents: 4, zipf_s: 1.0, document_tokens: {kind: fixed, value: 1600}, "
             "suffix_tokens: {kind: fixed, value: 64}}")
POOL_NODE = "remote: {pool_node: nvme-storage-16x, nodes: 1}"


@pytest.mark.parametrize("prefix, workload, cache, system, kept, kept_own", [
    (DOCUMENTS, "", "", "", True, True),
    (DOCUMENTS, "", ", hbm_eviction: lfu", "", False, False),
    (DOCUMENTS, "", ", dram: {capacity: 64 GiB}", "", False, True),
    (DOCUMENTS, "", ", nvme: {}", "", False, True),
    (DOCUMENTS, "", ", " + POOL_NODE, "", False, True),
    (DOCUMENTS, "", ", " + POOL_NODE + ", prewarm: true", "", False, True),
    (DOCUMENTS, "", ", dram: {capacity: 64 GiB}, write_policy: write_back", "", False, False),
    (DOCUMENTS, "", ", dram: {capacity: 64 GiB, eviction: lfu}", "", False, False),
    (DOCUMENTS, "", ", remote: {pool_node: nvme-storage-16x, nodes: 2}", "", False, False),
    (DOCUMENTS, "", ", dram: {capacity: 64 GiB}", ", router: cache_aware", False, False),
    (DOCUMENTS, "", ", write_policy: write_back", ", router: cache_aware", True, True),
    ("{kind: fixed_hit, hit_ratio: 0.5}", "\n  input_tokens: {kind: fixed, value: 1600}", "", "", False, False),
    (DOCUMENTS, "\n  adapters: {count: 2, rank: 16}", "", ", lora: {kv_sharing: byte_sharing}", False, False),
], ids=["document_domains", "lfu", "dram", "nvme", "pool", "prewarm", "dram_write_back", "dram_lfu", "pool_of_two",
        "dram_cache_aware", "hbm_only_write_back_cache_aware", "fixed_hit", "lora"])
def test_the_systems_kept_as_extents(prefix, workload, cache, system, kept, kept_own):
    """Only shared documents under LRU are kept as extents: HBM -- each instance's own or domains
    read in place -- and, under each instance's own HBM only, tiers below it written through with
    at most one pool node and a router that does not walk them (no LoRA, no P/D, no copy_in);
    the rest stay per block."""
    from kvsim.sim import check_scenario

    for mode, expected in (("read_in_place", kept), ("none", kept_own), ("copy_in", False)):
        text = (ELIGIBLE % (prefix, workload, cache, system)).replace("read_in_place", mode)
        scenario = kvsim.parse_scenario(text, "e.yaml")
        (sizing,) = check_scenario(scenario).values()
        assert build.kv_extents(scenario.points[0].spec, sizing) == expected, mode
