"""The validation notebook runs top to bottom and says what it should."""

from __future__ import annotations

from notebook_run import execute


def test_validation_notebook_executes(repo_root, kernel_for_this_python):
    _, text = execute(repo_root / "notebooks" / "05_validation.ipynb", kernel_for_this_python)
    assert "validation summary: TPOT median |error|" in text
