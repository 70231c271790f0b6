"""Absurd but schema-valid sizes are refused at validation -- one line naming the file, the line
and the field, with what the size would cost -- instead of hanging or running out of memory;
every shipped scenario and benchmark stays far below every limit."""

from __future__ import annotations

import glob
import math
from pathlib import Path

import pytest

import kvsim
from kvsim.cli import main
from kvsim.scenario import limits

BASE = """\
name: huge
duration: 10 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 1/s}
  input_tokens: {kind: fixed, value: 100}
  output_tokens: {kind: fixed, value: 10}
systems:
  s:
    node: h20-8x
    nodes: 1
    instance: {tp: 1}
"""

CASES = {
    # name: (edit of BASE: old -> new, the line's text, the field path, words the message must hold)
    "nodes": (("nodes: 1", "nodes: 1000000000"), "nodes: 1000000000", "systems.s.nodes",
              ["8,000,000,000 cards", "160 TB", "at most 131,072 cards"]),
    "clients": (("arrival: {kind: poisson, rate: 1/s}", "arrival: {kind: closed_loop, clients: 1000000000}"),
                "closed_loop", "workload.arrival.clients", ["1,000,000,000 clients", "10 TB", "at most 1,000,000"]),
    "closed loop for 10^12 s": (
        ("duration: 10 s\nmodel: qwen3-8b\nworkload:\n  arrival: {kind: poisson, rate: 1/s}",
         "duration: 1000000000000 s\nmodel: qwen3-8b\nworkload:\n  arrival: {kind: closed_loop, clients: 4}"),
        "duration:", "duration", ["3.17e+04 years", "~4e+12 requests from 4 closed-loop client(s)", "CPU",
                                  "at most 1e+07 s"]),
    "client-seconds": (
        ("duration: 10 s\nmodel: qwen3-8b\nworkload:\n  arrival: {kind: poisson, rate: 1/s}",
         "duration: 100000 s\nmodel: qwen3-8b\nworkload:\n  arrival: {kind: closed_loop, clients: 1000000}"),
        "duration:", "duration", ["1,000,000 closed-loop clients", "~1e+11 requests", "1e+10 client-seconds"]),
    "documents": (("  input_tokens: {kind: fixed, value: 100}\n",
                   "  prefix: {kind: shared_documents, documents: 1000000000, zipf_s: 1, "
                   "document_tokens: {kind: fixed, value: 100}, suffix_tokens: {kind: fixed, value: 10}}\n"),
                  "shared_documents", "workload.prefix.documents", ["1,000,000,000 documents", "24 GB",
                                                                    "at most 10,000,000"]),
    "pool nodes": (("instance: {tp: 1}", "instance: {tp: 1}\n    kv_cache: {remote: {pool_node: nvme-storage-16x, "
                                         "nodes: 1000000000}}"),
                   "kv_cache:", "systems.s.kv_cache.remote.nodes", ["1,000,000,000 pool nodes", "11 TB",
                                                                    "at most 10,000"]),
    "stages": (("arrival: {kind: poisson, rate: 1/s}",
                "arrival: {kind: stages, stages: [{rate: 1/s, duration: 1000000000 s}]}"),
               "stages", "workload.arrival.stages", ["~1e+09 requests per system", "300 GB", "shorten the stages"]),
    "phases": (("  arrival: {kind: poisson, rate: 1/s}\n  input_tokens: {kind: fixed, value: 100}\n"
                "  output_tokens: {kind: fixed, value: 10}\n",
                "  arrival:\n    kind: phases\n    phases:\n      - duration: 10 s\n"
                "        arrival: {kind: poisson, rate: 1000000000/s}\n"
                "        input_tokens: {kind: fixed, value: 100}\n        output_tokens: {kind: fixed, value: 10}\n"),
               "    phases:", "workload.arrival.phases", ["~1e+10 requests per system", "at most 2e+07"]),
    "open-loop rate": (("rate: 1/s", "rate: 1000000000/s"), "rate:", "workload.arrival.rate",
                       ["~1e+10 requests per system", "3 TB", "lower the rate"]),
    "replications": (("name: huge\n", "name: huge\nreplications: 200000\n"), "replications:", "replications",
                     ["200,000 system runs", "~2e+06 requests", "at most 100,000 runs"]),
}


def _line(text: str, needle: str) -> int:
    (line,) = [n for n, row in enumerate(text.splitlines(), 1) if needle in row]
    return line


@pytest.mark.parametrize("case", list(CASES))
def test_an_absurd_size_is_refused_with_its_cost(tmp_path, capsys, case):
    (old, new), needle, field, words = CASES[case]
    assert BASE.count(old) == 1
    text = BASE.replace(old, new)
    path = tmp_path / "huge.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    problems = [line.strip() for line in err.splitlines()[1:]]
    assert len(problems) == 1, err
    assert problems[0].startswith(f"{path}:{_line(text, needle)}: {field}: "), err
    for word in words:
        assert word in problems[0], (word, problems[0])


def test_a_huge_sweep_grid_is_refused_before_it_is_expanded(tmp_path, capsys, monkeypatch):
    import kvsim.scenario.load as load

    def expanded(*args, **kwargs):
        raise AssertionError("the grid was expanded")

    monkeypatch.setattr(load, "grid_points", expanded)
    rates = ", ".join(f"{k}/s" for k in range(1, 401))
    seqs = ", ".join(str(k) for k in range(1, 401))
    text = BASE + f"sweep:\n  workload.arrival.rate: [{rates}]\n  systems.s.instance.max_num_seqs: [{seqs}]\n"
    path = tmp_path / "grid.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{_line(text, 'workload.arrival.rate: [')}: sweep.workload.arrival.rate: the grid is 400 x 400 " \
           f"= 160,000 points (160,000 system runs: " in err
    assert "at most 10,000 points" in err and "Traceback" not in err


def test_a_swept_absurd_size_names_the_sweep_and_the_point(tmp_path, capsys):
    text = BASE + "sweep:\n  systems.s.nodes: [1, 2, 1000000000]\n"
    path = tmp_path / "swept.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{_line(text, 'systems.s.nodes: [')}: sweep.systems.s.nodes: at sweep point " \
           f"[systems.s.nodes=1000000000]: systems.s.nodes: 1,000,000,000 x h20-8x is 8,000,000,000 cards" in err


def test_a_size_just_within_a_limit_is_accepted():
    text = BASE.replace("nodes: 1", f"nodes: {limits.MAX_CARDS // 8}").replace("10 s", f"{limits.MAX_DURATION_S:g} s")
    text = text.replace("rate: 1/s", "rate: 1/min")
    scenario = kvsim.parse_scenario(text, "edge.yaml")
    assert scenario.spec.systems["s"].nodes * 8 == limits.MAX_CARDS


def _shipped() -> list[str]:
    root = Path(__file__).resolve().parent.parent
    return sorted(glob.glob(str(root / "scenarios" / "*.yaml")) + glob.glob(str(root / "benchmarks" / "*.yaml")))


def _loadable(path: str, folder: Path) -> Path:
    """``path``, or a copy of it beside its benchmark trace when the trace is made on demand
    (benchmarks/traces/ is not committed; a scenario loads only once the files it names exist)."""
    import sys

    bench = Path(path).parent
    if Path(path).name != "rr_conv_80.yaml" or (bench / "traces" / "rr_conv_80.csv").exists():
        return Path(path)
    lengths = bench.parent.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv_2023.csv"
    if not lengths.exists():
        pytest.skip("shared/traces/ not beside the repository")
    if str(bench) not in sys.path:
        sys.path.insert(0, str(bench))
    import rr_conv_trace

    rr_conv_trace.write(folder / "traces" / "rr_conv_80.csv", 80.0, 600.0, seed=0, lengths=lengths)
    copy = folder / Path(path).name
    copy.write_text(Path(path).read_text(encoding="utf-8"), encoding="utf-8")
    return copy


@pytest.mark.parametrize("path", _shipped(), ids=lambda p: Path(p).name)
def test_shipped_scenarios_stay_below_one_percent_of_every_limit(path, tmp_path):
    scenario = kvsim.load_scenario(_loadable(path, tmp_path))
    spec = scenario.spec
    points = math.prod(len(v) for v in spec.sweep.values()) if spec.sweep else 1
    used = {"sweep points": points / limits.MAX_SWEEP_POINTS,
            "runs": points * spec.replications * len(spec.systems) / limits.MAX_RUNS}
    for point in scenario.points:
        s = point.spec
        used["duration"] = max(used.get("duration", 0), s.duration / limits.MAX_DURATION_S)
        requests, _ = limits.expected_requests(s)
        used["requests"] = max(used.get("requests", 0), (requests or 0) / limits.MAX_REQUESTS)
        arrival = s.workload.arrival
        if arrival.kind == "closed_loop":
            used["clients"] = max(used.get("clients", 0), arrival.clients / limits.MAX_CLIENTS)
            used["client-seconds"] = max(used.get("client-seconds", 0),
                                         arrival.clients * s.duration / limits.MAX_CLIENT_SECONDS)
        documents = getattr(s.workload.prefix, "documents", None) or 0
        used["documents"] = max(used.get("documents", 0), documents / limits.MAX_DOCUMENTS)
        nodes = scenario.catalogs_for(point).nodes
        for system in s.systems.values():
            cards = sum(p.nodes * nodes[p.node].accelerators_per_node for p in system.pool_specs().values())
            used["cards"] = max(used.get("cards", 0), cards / limits.MAX_CARDS)
            remote = system.kv_cache.remote if system.kv_cache is not None else None
            used["pool nodes"] = max(used.get("pool nodes", 0), (remote.nodes if remote else 0) / limits.MAX_POOL_NODES)
    assert max(used.values()) < 0.01, used


def test_the_speed_ladders_largest_cases_pass():
    """The 1,024-card rung and the million-request case of benchmarks/speed_cases.py validate."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import speed_cases

    million = speed_cases.scenario_for("million", {"capacity_per_s": 3.55})
    requests, _ = limits.expected_requests(million.spec)
    assert requests == pytest.approx(speed_cases.MILLION)
    assert million.spec.systems["h20"].nodes * speed_cases.CARDS_PER_NODE == 1024


def test_a_long_sweep_does_not_copy_itself_into_every_point(monkeypatch):
    # each point's fields were set on a deep copy of the whole file, its sweep lists included:
    # quadratic in the points (a 10,000-point sweep took minutes to validate)
    import kvsim.scenario.load as load

    copied = []
    real = load.set_path

    def recording(data, dotted, value, **options):
        copied.append(len(data.get("sweep") or {}))
        return real(data, dotted, value, **options)

    monkeypatch.setattr(load, "set_path", recording)
    seeds = ", ".join(str(k) for k in range(1, 101))
    scenario = kvsim.parse_scenario(BASE + f"sweep:\n  seed: [{seeds}]\n", "sweep.yaml")
    assert len(scenario.points) == 100 and len(copied) == 100
    assert set(copied) == {0}


def test_a_sweep_over_the_sweep_is_refused(tmp_path, capsys):
    # each point's spec is built without the sweep lists, so such values would go nowhere
    path = tmp_path / "s.yaml"
    text = BASE + "sweep:\n  seed: [1, 2]\n  sweep.seed: [[3]]\n"
    path.write_text(text, encoding="utf-8")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{_line(text, 'sweep.seed:')}: sweep.sweep.seed: sweep.seed: a sweep cannot change the sweep" in err
