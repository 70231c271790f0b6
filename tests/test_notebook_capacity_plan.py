"""The capacity plan notebook runs top to bottom and says what it should."""

from __future__ import annotations

from notebook_run import execute


def test_capacity_plan_notebook_executes(repo_root, kernel_for_this_python):
    _, text = execute(repo_root / "notebooks" / "04_capacity_plan.ipynb", kernel_for_this_python)
    assert "cheapest by cost per hour" in text
    line = next(row for row in text.splitlines() if row.startswith("l20-pool units for 6/s"))
    before, after = [int(part.split(" at ")[0].split()[-1]) for part in line.split(", ")]
    assert after >= before  # a tighter objective never needs fewer units
