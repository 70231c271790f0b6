"""Reports of run results: comparison tables, result files, and the run report rendered from saved result files.

The names are imported when first read (a module ``__getattr__``, PEP 562): a run imports
:mod:`kvsim.report.table` without loading the result files' writer or the run report.
"""

__all__ = ["comparison_table", "write_results", "run_document", "write_run_report"]


def __getattr__(name: str) -> object:
    if name == "comparison_table":
        from kvsim.report.table import comparison_table as value
    elif name == "write_results":
        from kvsim.report.files import write_results as value
    elif name == "run_document":
        from kvsim.report.run_report import run_document as value
    elif name == "write_run_report":
        from kvsim.report.run_report import write_run_report as value
    else:
        raise AttributeError(f"module 'kvsim.report' has no attribute {name!r}")
    globals()[name] = value  # later reads are plain lookups (and a patched value stays as set)
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
