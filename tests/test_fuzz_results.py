"""The results-folder fuzzer (issue 22): stored sweep points tampered with at random, then resumed.

A planner shares results folders and re-runs into them; whatever a folder holds, resuming must
not run foreign code, crash, or silently use a changed point. Each case copies a stored sweep
(two points of two systems), applies one to three random changes to a point's files -- bytes
(truncate, flip, insert, empty, junk), JSON trees (delete, retype or replace a value), whole files
(delete, swap with the other point's, replace with a folder, add a foreign file such as a
crafted ``runs.pickle``) -- and, in half the cases, seals the folder again so the changes reach
the checks below the marker's digests. Then ``run_sweep`` resumes it. What must hold:

- no exception, and nothing the folder holds is executed (the crafted pickle's sentinel file
  never appears);
- a changed point is recomputed with exactly one line naming it, ending ``recomputing``; an
  unchanged point (or one changed only by an added foreign file) is reused without a line;
- the resumed result equals the untouched run (summaries, every table, the records digest).

The default suite checks DEFAULT_CASES cases; ``pytest -m fuzz tests/test_fuzz_results.py``
checks MARKER_CASES more. Draws come from a fixed hypothesis seed, so a run is repeatable.
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

import kvsim
from kvsim.plan import SweepStats, run_sweep
from kvsim.plan.store import MARKER, seal

DEFAULT_CASES = 40
MARKER_CASES = 400

TINY = """\
name: fuzz-store
seed: 9
duration: 6 s
warmup: 1 s
model: qwen3-1.7b
workload:
  arrival: {kind: poisson, rate: 3/s}
  input_tokens: {kind: uniform, low: 64, high: 512}
  output_tokens: {kind: fixed, value: 8}
systems:
  a: {node: h20-8x, instances: 1}
  b:
    node: l20-8x
    instances: 1
    kv_cache: {dram: {capacity: 8 GiB}}
sweep:
  workload.arrival.rate: [2/s, 4/s]
"""

FILES = ["runs.json", "requests.parquet", "summary.parquet", "point.json", "inputs.json", MARKER]
NASTY = [None, True, 0, -1, 1.5, 1e308, "", "x", [], {}, [1, 2], {"a": 1}, "NaN", 2**70, "../../etc/passwd"]


class _Payload:
    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@st.composite
def changes(draw):
    """One to three changes: (operation, file, parameters)."""
    ops = []
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["truncate", "flip", "insert", "empty", "junk", "json_delete", "json_value",
                                   "delete", "swap", "folder", "foreign"]))
        ops.append((op, draw(st.sampled_from(FILES)), draw(st.integers(0, 10**6)), draw(st.sampled_from(NASTY)),
                    draw(st.binary(min_size=1, max_size=8))))
    return ops, draw(st.booleans())


def _json_paths(node, prefix=()):
    out = []
    if isinstance(node, dict):
        for key, value in node.items():
            out.append(prefix + (key,))
            out += _json_paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node[:4]):
            out.append(prefix + (i,))
            out += _json_paths(value, prefix + (i,))
    return out


def apply(folder: Path, other: Path, op: str, name: str, number: int, value, junk: bytes, sentinel: Path) -> bool:
    """Apply one change; True if it changed a file kvsim reads (a foreign file added does not)."""
    path = folder / name
    if op == "foreign":
        foreign = ["runs.pickle", "evil.py", "__init__.py", ".hidden.tmp", "requests.csv"][number % 5]
        data = pickle.dumps([_Payload(str(sentinel))]) if foreign == "runs.pickle" else b"import os\n"
        (folder / foreign).write_bytes(data)
        return False
    if not path.is_file():
        return False  # deleted or made a folder by an earlier change: this one has nothing to change
    data = path.read_bytes()
    if op == "delete":
        path.unlink()
    elif op == "folder":
        path.unlink()
        path.mkdir()
    elif op == "swap":
        shutil.copyfile(other / name, path)
    elif op == "truncate":
        path.write_bytes(data[:number % (len(data) + 1)])
    elif op == "flip" and data:
        at = number % len(data)
        path.write_bytes(data[:at] + bytes([data[at] ^ (1 << number % 8)]) + data[at + 1:])
    elif op == "insert":
        at = number % (len(data) + 1)
        path.write_bytes(data[:at] + junk + data[at:])
    elif op == "empty":
        path.write_bytes(b"")
    elif op == "junk":
        path.write_bytes(junk * (1 + number % 100))
    elif op in ("json_delete", "json_value") and name.endswith(".json"):
        try:
            tree = json.loads(data)
        except ValueError:
            return False
        paths = _json_paths(tree)
        if not paths:
            return False
        where = paths[number % len(paths)]
        parent = tree
        for step in where[:-1]:
            parent = parent[step]
        if op == "json_delete":
            del parent[where[-1]]
        else:
            parent[where[-1]] = value
        path.write_text(json.dumps(tree))
    return path.is_dir() or not path.is_file() or path.read_bytes() != data


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    out = tmp_path_factory.mktemp("fuzz-store")
    scenario = kvsim.parse_scenario(TINY, "tiny.yaml")
    stats = SweepStats()
    fresh = run_sweep(scenario, out, workers=1, log=False, stats=stats)
    return scenario, out, stats.ran, fresh


def _same(fresh, resumed) -> str | None:
    if json.dumps(resumed.summary_dict(), sort_keys=True) != json.dumps(fresh.summary_dict(), sort_keys=True):
        return "summaries differ"
    if resumed.records_digest() != fresh.records_digest():
        return "records differ"
    for name in ("timeseries_frame", "links_frame", "storage_frame", "summary_frame"):
        if not getattr(resumed, name)().equals(getattr(fresh, name)()):
            return f"{name} differs"
    return None


def fuzz(stored, tmp_path: Path, n: int, chunk_seed: int, capsys) -> list[str]:
    scenario, original, keys, fresh = stored
    failures: list[str] = []
    count = 0

    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @hypothesis_seed(chunk_seed)
    @given(changes(), st.integers(0, 1))
    def one(drawn, victim_index):
        nonlocal count
        ops, reseal = drawn
        out = tmp_path / f"case{count}"
        count += 1
        shutil.copytree(original, out)
        victim, other = out / "points" / keys[victim_index], out / "points" / keys[1 - victim_index]
        sentinel = tmp_path / f"pwned{count}"
        changed = False
        for op in ops:
            # a marker edited or deleted is caught, or harmless (its time), or leaves the point
            # unfinished (run again without a line, as after a kill): not a change to be named
            changed |= apply(victim, other, *op, sentinel) and op[1] != MARKER
        if reseal and victim.is_dir() and not (victim / MARKER).is_dir():
            seal(victim, victim.name)  # the damage then meets the checks under the digests
        unfinished = not (victim / MARKER).exists()
        capsys.readouterr()
        label = f"case {count - 1} (point {victim_index}, {'resealed' if reseal else 'as changed'}): {ops}"
        stats = SweepStats()
        try:
            resumed = run_sweep(scenario, out, workers=1, log=True, stats=stats)
        except BaseException as exc:  # noqa: BLE001 - exactly what the fuzzer looks for
            failures.append(f"{label}: {type(exc).__name__}: {exc}"[:400])
            return
        finally:
            shutil.rmtree(out, ignore_errors=True)
        lines = [line for line in capsys.readouterr().err.splitlines() if "cannot be read" in line]
        if sentinel.exists():
            failures.append(f"{label}: the crafted pickle ran")
        if stats.ran not in ([], [keys[victim_index]]) or sorted(stats.ran + stats.reused) != sorted(keys):
            failures.append(f"{label}: ran {stats.ran}, reused {stats.reused}")
        if stats.ran and not unfinished and (len(lines) != 1 or not lines[0].endswith("; recomputing")
                                             or f"points/{keys[victim_index]}" not in lines[0]):
            failures.append(f"{label}: recomputed with lines {lines}")
        if (not stats.ran or unfinished) and lines:
            failures.append(f"{label}: {'unfinished' if unfinished else 'reused'} but said {lines}")
        if changed and not reseal and not stats.ran:
            failures.append(f"{label}: a changed point was reused")
        wrong = _same(fresh, resumed)
        # sealed again over an edit of runs.json that still parses and checks, the point is the
        # edited data (a seal is trust); its records, though, must be the run's own
        edited = reseal and not stats.ran and any(op[1] == "runs.json" for op in ops)
        if wrong and not (edited and wrong == "summaries differ" or edited and wrong.endswith("frame differs")):
            failures.append(f"{label}: {wrong}")

    one()
    return failures


def test_fuzz_results_default(stored, tmp_path, capsys):
    failures = fuzz(stored, tmp_path, DEFAULT_CASES, 0, capsys)
    assert not failures, "\n".join(failures[:10])


@pytest.mark.fuzz
def test_fuzz_results_marker(stored, tmp_path, capsys):
    failures = fuzz(stored, tmp_path, MARKER_CASES, 1, capsys)
    assert not failures, "\n".join(failures[:10])
