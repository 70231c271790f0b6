"""Reports of run results: comparison tables and result files (reads RunResult only)."""

from kvsim.report.files import write_results
from kvsim.report.table import comparison_table

__all__ = ["comparison_table", "write_results"]
