"""kvsim: a discrete-event simulator of LLM inference serving.

See :mod:`kvsim.api` for the notebook-facing functions re-exported here.
"""

__version__ = "0.1.0"

from kvsim.api import RunResult, Scenario, check, comparison_table, load_scenario, parse_scenario, run  # noqa: E402
from kvsim.yaml_io import SpecError  # noqa: E402

__all__ = [
    "__version__", "load_scenario", "parse_scenario", "run", "check", "comparison_table",
    "Scenario", "RunResult", "SpecError",
]
