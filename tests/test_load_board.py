"""The least-outstanding router without a scan (issue 9): the load board's heap gives the same
choice as a scan of the instances of a role -- on random arrival, finish, abort and role-switch
sequences at unit level, and on whole runs (colocated, cached, disaggregated with role switches
and client timeouts), whose records are compared bit for bit against runs that scan."""

from __future__ import annotations

import random

import pytest

import kvsim
from kvsim import backend
from kvsim.serving.load_board import LoadBoard
from kvsim.serving.router import LeastOutstandingRouter, least_outstanding_scan, make_router

BACKENDS = ["python"] + (["compiled"] if backend.compiled_problem() is None else [])
"""The board and its router are kernels: each backend's is held to the scan (the compiled board
reads any object that has what the reference reads)."""


class _Fake:
    """Just what the board and the router read of an instance."""

    def __init__(self, index: int, role: str):
        self.index = index
        self.role = role
        self._accepting = True
        self.outstanding = 0
        self.board = None

    @property
    def accepting(self) -> bool:
        return self._accepting

    @accepting.setter
    def accepting(self, value: bool) -> None:
        self._accepting = value
        if self.board is not None:
            self.board.moved(self)


def _scan_members(instances, role):
    return [inst for inst in instances if inst.role == role and inst.accepting]


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("seed", range(12))
def test_the_board_chooses_as_the_scan_on_random_arrivals_finishes_and_role_switches(seed, backend_name):
    rng = random.Random(seed)
    n = rng.choice([1, 2, 3, 5, 8, 17, 64])
    roles = ["mixed"] if rng.random() < 0.4 else ["prefill", "decode"]
    fakes = [_Fake(i, rng.choice(roles)) for i in range(n)]
    kernel = backend.kernels(backend_name).load_board
    board = kernel.LoadBoard()
    for inst in fakes:
        board.add(inst)
    router = make_router("least_outstanding", board=board)
    assert type(router) is kernel.LeastOutstandingRouter and router.board is board
    pending = []  # instances whose count moved, to be notified before the next decision
    decisions = heap_max = 0
    for _ in range(3000):
        op = rng.random()
        if op < 0.45:
            role = rng.choice(roles)
            members = board.members(role)
            assert members == _scan_members(fakes, role)  # index order, only those taking work
            if not members:
                continue
            # a change not yet notified may be pending only where it cannot be read: notify now
            for inst in pending:
                board.changed(inst)
            pending.clear()
            expected = least_outstanding_scan(_scan_members(fakes, role))
            got = router.choose(members)
            assert got == expected
            decisions += 1
            members[got].outstanding += 1
            board.changed(members[got])
            heap_max = max(heap_max, len(board._roles[role].heap))
        elif op < 0.85:
            busy = [inst for inst in fakes if inst.outstanding > 0]
            if busy:
                inst = rng.choice(busy)
                inst.outstanding -= rng.choice([1, 1, 1, 2]) if inst.outstanding > 1 else 1
                # notified at once, or later (several changes between two decisions)
                (board.changed(inst) if rng.random() < 0.5 else pending.append(inst))
        elif op < 0.95:
            # a count that moves and moves back between two decisions
            inst = rng.choice(fakes)
            inst.outstanding += 1
            board.changed(inst)
            inst.outstanding -= 1
            pending.append(inst)
        else:
            # a role switch: stop accepting, requests not started leave, change role, accept again
            inst = rng.choice(fakes)
            inst.accepting = False
            moved = rng.randint(0, inst.outstanding)
            inst.outstanding -= moved
            if rng.random() < 0.7:
                inst.role = rng.choice(roles)
                board.moved(inst)
            if rng.random() < 0.8:
                inst.accepting = True
    assert decisions > 500
    assert heap_max <= 2 * n + 64 + 2  # stale entries are compacted away


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_a_list_that_is_not_the_boards_is_scanned(backend_name):
    kernel = backend.kernels(backend_name).load_board
    board = kernel.LoadBoard()
    fakes = [_Fake(i, "mixed") for i in range(6)]
    for inst, load in zip(fakes, [3, 1, 4, 1, 5, 9]):
        board.add(inst)
        inst.outstanding = load
        board.changed(inst)
    router = kernel.LeastOutstandingRouter(board)
    assert router.choose(board.members("mixed")) == 1  # fewest, lowest index on ties
    assert board.least_outstanding(fakes[2:]) is None  # a copy or a slice: the board does not know it
    assert router.choose(fakes[2:]) == 1  # scanned: position of instance 3 in the slice
    assert kernel.LeastOutstandingRouter().choose(fakes) == 1
    assert LeastOutstandingRouter is backend.kernels("python").load_board.LeastOutstandingRouter  # re-exported


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_a_change_the_board_is_not_told_of_leads_it_astray(backend_name):
    """What the contract protects: the board reads counts only of instances it was told about."""
    board = backend.kernels(backend_name).load_board.LoadBoard()
    fakes = [_Fake(i, "mixed") for i in range(4)]
    for inst in fakes:
        board.add(inst)
        inst.outstanding = 2
        board.changed(inst)
    members = board.members("mixed")
    assert board.least_outstanding(members) == 0
    fakes[3].outstanding = 0  # not notified
    assert board.least_outstanding(members) == 0 != least_outstanding_scan(members)
    board.changed(fakes[3])
    assert board.least_outstanding(members) == 3 == least_outstanding_scan(members)


# ---------------------------------------------------------------------------------------------
# whole runs: the board against the scan
# ---------------------------------------------------------------------------------------------

SHIFT = """
name: shift-lo
seed: 5
duration: 90 s
warmup: 0 s
model: qwen3-8b
workload:
  timeout: {timeout}
  arrival:
    kind: phases
    phases:
      - {{duration: 45 s, arrival: {{kind: poisson, rate: 8/s}}, input_tokens: {{kind: fixed, value: 3000}},
         output_tokens: {{kind: fixed, value: 20}}}}
      - {{duration: 45 s, arrival: {{kind: poisson, rate: 10/s}}, input_tokens: {{kind: lognormal, median: 300,
         sigma: 0.6, max: 2000}}, output_tokens: {{kind: lognormal, median: 500, sigma: 0.5, max: 2000}}}}
slo: {{ttft_p99: 3 s, tpot_p99: 60 ms}}
systems:
  pd:
    pools:
      h20: {{node: h20-8x, roles: {{prefill: 4, decode: 4}}}}
    prefill_router: least_outstanding
    decode_router: least_outstanding
    kv_handoff: {{mode: {mode}}}
    controller: {{kind: threshold, signal: prefill_queue, interval: 6 s, low: 500, high: 8000, switch_time: 3 s}}
"""

CACHED = """
name: cached-switch-lo
seed: 0
duration: 20 s
warmup: 1 s
model: qwen3-8b
workload:
  timeout: 0.4 s
  arrival: {kind: closed_loop, clients: 24, think_time: 0.1 s}
  prefix: {kind: fixed_hit, hit_ratio: 0.7}
  input_tokens: {kind: uniform, low: 200, high: 3000}
  output_tokens: {kind: uniform, low: 1, high: 40}
systems:
  pd:
    pools:
      h: {node: h20-8x, roles: {prefill: 3, decode: 5}, instance: {activation_reserve: 68.5 GiB, max_num_seqs: 32}}
    prefill_router: least_outstanding
    decode_router: least_outstanding
    controller: {kind: threshold, signal: decode_kv_occupancy, interval: 0.5 s, low: 0.2, high: 0.5, switch_time: 0.2 s}
    kv_cache: {dram: {capacity: 8 GiB}}
"""

MIXED_CACHED = """
name: mixed-cached-lo
seed: 2
duration: 20 s
warmup: 1 s
model: qwen3-8b
workload:
  timeout: 3 s
  arrival: {kind: closed_loop, clients: 48, think_time: 0.05 s}
  prefix: {kind: fixed_hit, hit_ratio: 0.6}
  input_tokens: {kind: uniform, low: 200, high: 6000}
  output_tokens: {kind: uniform, low: 1, high: 60}
systems:
  mixed:
    node: h20-8x
    instance: {activation_reserve: 68.5 GiB, max_num_seqs: 16}
    kv_cache: {dram: {capacity: 8 GiB}}
"""


def _scenarios(repo_root):
    h20 = kvsim.load_scenario(repo_root / "scenarios" / "h20_vs_l20.yaml").with_changes(
        {"duration": "40 s", "warmup": "5 s", "sweep": {"workload.arrival.rate": ["15/s", "40/s"]}})
    return {
        "h20_vs_l20": h20,
        "h20_vs_l20_timeouts": h20.with_changes({"workload.timeout": "8 s",
                                                 "sweep": {"workload.arrival.rate": ["25/s"]}}),
        "mixed_cached_timeouts": kvsim.parse_scenario(MIXED_CACHED, "mixed.yaml"),
        "pd_switching": kvsim.parse_scenario(SHIFT.format(timeout="null", mode="layerwise"), "shift.yaml"),
        # a whole-prompt handoff routes to a decode instance from inside the prefill instance's step,
        # while the detached prompt is still in its running list (the board must not read it then)
        "pd_switching_timeouts": kvsim.parse_scenario(SHIFT.format(timeout="4 s", mode="whole"), "shift.yaml"),
        "pd_cached_switching": kvsim.parse_scenario(CACHED, "cached.yaml"),
    }


def _scan_everything(monkeypatch):
    """The routing as it was: the role's list built on every arrival, and scanned."""
    monkeypatch.setattr(LeastOutstandingRouter, "choose", lambda self, instances, seq=None:
                        least_outstanding_scan(instances))
    monkeypatch.setattr(LoadBoard, "members", lambda self, role:
                        [inst for inst in self.instances if inst.role == role and inst.accepting])


@pytest.mark.parametrize("name", ["h20_vs_l20", "h20_vs_l20_timeouts", "mixed_cached_timeouts", "pd_switching",
                                  "pd_switching_timeouts", "pd_cached_switching"])
def test_whole_runs_route_as_the_scan_and_keep_their_records(repo_root, monkeypatch, built_systems, name):
    monkeypatch.setenv("KVSIM_BACKEND", "python")  # the reference's router and board (compiled: cdef classes)
    scenario = _scenarios(repo_root)[name]
    checked = {"decisions": 0, "fast": 0}
    real_choose = LeastOutstandingRouter.choose

    def choose(self, instances, seq=None):
        got = real_choose(self, instances, seq)
        # every decision: the scan's answer, over the list the old code built
        role = instances[got].role
        assert list(instances) == [i for i in self.board.instances if i.role == role and i.accepting]
        assert got == least_outstanding_scan(instances)
        checked["decisions"] += 1
        checked["fast"] += self.board.least_outstanding(instances) is not None
        return got

    with monkeypatch.context() as patch:
        patch.setattr(LeastOutstandingRouter, "choose", choose)
        fast = kvsim.run(scenario)
    assert checked["decisions"] > 300 and checked["fast"] == checked["decisions"]
    if name.startswith("pd"):
        assert len(fast.switches_frame()) >= 2  # roles changed under the router
    if "timeouts" in name or name == "pd_cached_switching":
        assert fast.requests_frame().aborted_s.notna().sum() > 0  # and clients gave up
    if "cached" in name:
        assert fast.requests_frame().hit_tokens_dram.sum() > 0  # and prefixes loaded from DRAM
    with monkeypatch.context() as patch:
        _scan_everything(patch)
        scanned = kvsim.run(scenario)
    assert fast.records_digest() == scanned.records_digest()
    assert [r.summary for r in fast.runs] == [r.summary for r in scanned.runs]
