"""The domains notebook runs top to bottom and says what it should."""

from __future__ import annotations

from notebook_run import execute


def test_domains_notebook_executes(repo_root, kernel_for_this_python):
    _, text = execute(repo_root / "notebooks" / "03_domains.ipynb", kernel_for_this_python)
    assert "cross-domain bytes, fewest domains first" in text
    # one domain copies nothing across; four servers copy the most
    line = next(row for row in text.splitlines() if row.startswith("cross-domain bytes"))
    values = [float(v.split()[0]) for v in line.split("[")[1].rstrip("]").replace("'", "").split(",")]
    assert values[0] == 0.0 and values[-1] > values[0]
