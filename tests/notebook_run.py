"""Running a notebook top to bottom in a test (the notebooks are documentation that must stay
true). One test file per notebook so the workers share them out (``--dist loadfile``)."""

from __future__ import annotations

import nbformat
from nbclient import NotebookClient


def execute(path, kernel: str) -> tuple[list, str]:
    """Run a notebook top to bottom; its outputs and its printed text."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=600, kernel_name=kernel,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the plot cells drew
    return outputs, "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
