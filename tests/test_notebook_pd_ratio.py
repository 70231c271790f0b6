"""The pd ratio notebook runs top to bottom and says what it should."""

from __future__ import annotations

from notebook_run import execute


def test_pd_ratio_notebook_executes(repo_root, kernel_for_this_python):
    _, text = execute(repo_root / "notebooks" / "02_pd_ratio.ipynb", kernel_for_this_python)
    assert "worst-phase SLO attainment" in text
