"""Reports of run results: comparison tables, result files, and the run report rendered from saved result files."""

from kvsim.report.files import write_results
from kvsim.report.run_report import run_document, write_run_report
from kvsim.report.table import comparison_table

__all__ = ["comparison_table", "write_results", "run_document", "write_run_report"]
