"""The notebooks run top to bottom (they are documentation that must stay true)."""

from __future__ import annotations

import json
import sys

import nbformat
import pytest
from nbclient import NotebookClient


@pytest.fixture
def kernel_for_this_python(tmp_path, monkeypatch):
    # Pin the notebook kernel to the interpreter running the tests (the one with kvsim
    # installed), whatever kernels the machine has registered elsewhere.
    spec_dir = tmp_path / "jupyter" / "kernels" / "kvsim-test"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "kvsim test", "language": "python",
    }))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return "kvsim-test"


def _execute(path, kernel: str) -> tuple[list, str]:
    """Run a notebook top to bottom; its outputs and its printed text."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=600, kernel_name=kernel,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the plot cells drew
    return outputs, "".join(o.get("text", "") for o in outputs if o.output_type == "stream")


def test_quickstart_notebook_executes(repo_root, kernel_for_this_python):
    _, text = _execute(repo_root / "notebooks" / "01_quickstart.ipynb", kernel_for_this_python)
    # the closing cell printed both ratios
    assert "TPOT l20/h20" in text and "TTFT l20/h20" in text
    # past saturation H20's tokens processed stay at their peak (the plotted throughput does not fall)
    line = next(l for l in text.splitlines() if l.startswith("h20: tokens/s at the highest load"))
    assert float(line.split("=")[1].split(";")[0]) >= 0.98


def test_pd_ratio_notebook_executes(repo_root, kernel_for_this_python):
    _, text = _execute(repo_root / "notebooks" / "02_pd_ratio.ipynb", kernel_for_this_python)
    assert "worst-phase SLO attainment" in text


def test_validation_notebook_executes(repo_root, kernel_for_this_python):
    _, text = _execute(repo_root / "notebooks" / "05_validation.ipynb", kernel_for_this_python)
    assert "validation summary: TPOT median |error|" in text


def test_domains_notebook_executes(repo_root, kernel_for_this_python):
    _, text = _execute(repo_root / "notebooks" / "03_domains.ipynb", kernel_for_this_python)
    assert "cross-domain bytes, fewest domains first" in text
    # one domain copies nothing across; four servers copy the most
    line = next(l for l in text.splitlines() if l.startswith("cross-domain bytes"))
    values = [float(v.split()[0]) for v in line.split("[")[1].rstrip("]").replace("'", "").split(",")]
    assert values[0] == 0.0 and values[-1] > values[0]


def test_capacity_plan_notebook_executes(repo_root, kernel_for_this_python):
    _, text = _execute(repo_root / "notebooks" / "04_capacity_plan.ipynb", kernel_for_this_python)
    assert "cheapest by cost per hour" in text
    line = next(l for l in text.splitlines() if l.startswith("l20-pool units for 6/s"))
    before, after = [int(part.split(" at ")[0].split()[-1]) for part in line.split(", ")]
    assert after >= before  # a tighter objective never needs fewer units
