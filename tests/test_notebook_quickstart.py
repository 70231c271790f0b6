"""The quickstart notebook runs top to bottom and says what it should."""

from __future__ import annotations

from notebook_run import execute


def test_quickstart_notebook_executes(repo_root, kernel_for_this_python):
    _, text = execute(repo_root / "notebooks" / "01_quickstart.ipynb", kernel_for_this_python)
    # the closing cell printed both ratios
    assert "TPOT l20/h20" in text and "TTFT l20/h20" in text
    # past saturation H20's tokens processed stay at their peak (the plotted throughput does not fall)
    line = next(row for row in text.splitlines() if row.startswith("h20: tokens/s at the highest load"))
    assert float(line.split("=")[1].split(";")[0]) >= 0.98
