"""The lint setup (issue 29, item 4): pyproject.toml's [tool.ruff] selects a documented rule set,
says why for each rule it leaves out, spares exactly the compiled kernels ruff's rewrites, and
`.ci/run` runs it after mypy.

ruff is a ``dev`` dependency run by `.ci/run`; it checks the whole tree in well under a second,
so where it is installed this suite runs it too (and says it is skipped where it is not).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kvsim.backend_kernels import KERNELS

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"

# the families selected, each whole (docs/architecture.md, "Lint", says what each is for)
FAMILIES = {"E", "W", "F", "B", "UP", "I"}
# what ruff may not do to a kernel unaided: rewrite annotations or imports, rename loop counters
KERNEL_IGNORES = ["UP", "I001", "B007"]


def _pyproject() -> dict:
    with open(PYPROJECT, "rb") as f:
        return tomllib.load(f)


def _array_lines(key: str, section: str) -> list[str]:
    """The source lines of the TOML array ``key = [...]`` under ``[section]``, brackets excluded."""
    text = PYPROJECT.read_text(encoding="utf-8")
    body = text.split(f"\n[{section}]\n", 1)[1].split("\n[", 1)[0]
    inside = re.search(rf"^{key} = \[\n(.*?)^\]", body, re.S | re.M)
    assert inside, f"[{section}] {key} is not a multi-line array"
    return inside.group(1).splitlines()


def test_the_selected_families_are_the_documented_ones_each_said_why() -> None:
    ruff = _pyproject()["tool"]["ruff"]
    assert ruff["line-length"] == 120
    assert set(ruff["lint"]["select"]) == FAMILIES and len(ruff["lint"]["select"]) == len(FAMILIES)
    lines = [line for line in _array_lines("select", "tool.ruff.lint") if line.strip()]
    assert len(lines) == len(FAMILIES)
    for line in lines:  # one family a line, with a comment saying what it catches
        assert re.fullmatch(r'\s*"[A-Z]+",\s+# \S.{20,}', line), line
    assert "extend-select" not in ruff["lint"] and "fixable" not in ruff["lint"]


def test_each_ignored_rule_has_its_reason_above_it() -> None:
    ignored = _pyproject()["tool"]["ruff"]["lint"]["ignore"]
    assert ignored and all(re.fullmatch(r"[A-Z]+[0-9]+", code) for code in ignored)  # rules, not families
    assert all(code.rstrip("0123456789") in FAMILIES for code in ignored)
    lines = [line.strip() for line in _array_lines("ignore", "tool.ruff.lint")]
    for code in ignored:
        at = lines.index(f'"{code}",')
        assert at > 0 and lines[at - 1].startswith("# "), f"{code}: no comment above it saying why"


def test_exactly_the_compiled_kernels_are_spared_rewrites() -> None:
    per_file = _pyproject()["tool"]["ruff"]["lint"]["per-file-ignores"]
    kernels = {module.replace(".", "/") + ".py" for module in KERNELS}
    assert set(per_file) == kernels  # a new kernel is added here; a module no longer compiled leaves
    assert all((ROOT / path).is_file() for path in kernels)
    assert all(rules == KERNEL_IGNORES for rules in per_file.values())


def test_ruff_is_a_dev_dependency_with_a_lower_bound() -> None:
    dev = _pyproject()["project"]["optional-dependencies"]["dev"]
    assert [d for d in dev if re.fullmatch(r"ruff>=[0-9.]+", d)], dev


def test_ci_runs_ruff_after_mypy() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    readme_command = ".venv/bin/python -m pytest"
    assert script.index(readme_command) < script.index(".venv/bin/mypy") < script.index(".venv/bin/ruff check")
    assert script.index("'.[dev]'") < script.index(".venv/bin/ruff check")  # installed before it runs


def _ruff() -> str | None:
    beside = Path(sys.executable).with_name("ruff")  # the venv's, as .ci/run runs it
    return str(beside) if beside.is_file() else shutil.which("ruff")


@pytest.mark.skipif(_ruff() is None, reason="ruff is not installed (pip install -e '.[dev]'); .ci/run runs it")
def test_the_tree_is_clean() -> None:
    done = subprocess.run([_ruff(), "check", "--no-cache", "--output-format", "concise"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
