"""The scenario fuzzer (issue 11): mutated scenarios through ``kvsim validate``, ``kvsim run`` and
the Python API, each case checked by tests/fuzz_oracle.py -- no traceback, exit 2 with
``file:line`` for invalid input, valid input runs, no hang.

The cases are hypothesis draws (tests/fuzz_mutate.py) from a fixed seed per chunk, generation
only (no shrinking: a failing case is listed with its mutations instead), so a run is repeatable.
The default suite checks DEFAULT_CASES; ``pytest -m fuzz -n 2 --dist load tests/test_fuzz.py``
checks MARKER_CHUNKS x CHUNK_CASES more, in chunks the workers share. The tally is printed in
the terminal summary (tests/conftest.py).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

from fuzz_bases import all_bases
from fuzz_mutate import cases
from fuzz_oracle import FAILURES, check_case, cli, report_failures, tally

DEFAULT_CASES = 240
MARKER_CHUNKS = 50
CHUNK_CASES = 205
KEEP = os.environ.get("KVSIM_FUZZ_KEEP")
"""A folder to copy every failing case into (its scenario and side files), to reproduce it."""


def fuzz_chunk(chunk_seed: int, n: int, tmp_path: Path, request) -> None:
    outcomes, seen = [], set()
    bases = all_bases()

    @settings(max_examples=2 * n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @hypothesis_seed(chunk_seed)
    @given(cases(bases))
    def one(case):
        key = (case.text, tuple(sorted(case.files.items())), tuple(case.sets), case.api, repr(case.api_change))
        if key in seen or len(outcomes) >= n:  # hypothesis draws some cases twice: each distinct case is
            return                                # checked and counted once, until n are

        seen.add(key)
        folder = tmp_path / f"case{len(outcomes)}"
        outcome = check_case(case, folder)
        outcomes.append((f"case {len(outcomes)} of chunk {chunk_seed}: {case.describe()}", outcome))
        if KEEP and outcome.kind in FAILURES:
            shutil.copytree(folder, Path(KEEP) / f"{chunk_seed}-{len(outcomes) - 1}", dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("out"))
        shutil.rmtree(folder, ignore_errors=True)

    one()
    request.node.user_properties.append(("fuzz_outcomes", tally(outcomes)))
    assert len(outcomes) == n, f"hypothesis drew only {len(outcomes)} distinct cases in {2 * n} draws"
    failures = report_failures(outcomes)
    assert not failures, failures


def test_fuzz_default(tmp_path, request):
    fuzz_chunk(0, DEFAULT_CASES, tmp_path, request)


@pytest.mark.fuzz
@pytest.mark.parametrize("chunk", range(1, MARKER_CHUNKS + 1))
def test_fuzz_marker(chunk, tmp_path, request):
    fuzz_chunk(chunk, CHUNK_CASES, tmp_path, request)


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo.yaml"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("make", [
    lambda t: t,  # a folder
    lambda t: t / "missing.yaml",
    lambda t: Path("/dev/null"),
    lambda t: Path("/dev/zero"),
    _fifo,  # opening it for reading would wait for a writer forever
], ids=["folder", "missing", "dev-null", "dev-zero", "fifo"])
def test_a_scenario_path_that_is_no_scenario_file_is_refused(tmp_path, make):
    path = make(tmp_path)
    for command in ("validate", "run"):
        rc, out, err, problem = cli([command, str(path), "--out", str(tmp_path / "o")][:2 if command == "validate"
                                                                                      else 4], 10)
        assert problem is None and rc == 2, (rc, err, problem)
        assert str(path) in err and "Traceback" not in err
