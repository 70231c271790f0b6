"""kvsim: a discrete-event simulator of LLM inference serving.

See :mod:`kvsim.api` for the notebook-facing functions re-exported here.
"""

from kvsim._version import __version__

from kvsim.api import RunResult, Scenario, check, comparison_table, load_scenario, parse_scenario, run  # noqa: E402
from kvsim.yaml_io import SpecError  # noqa: E402

__all__ = [
    "__version__", "load_scenario", "parse_scenario", "run", "check", "comparison_table",
    "Scenario", "RunResult", "SpecError",
]
