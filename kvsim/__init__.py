"""kvsim: a discrete-event simulator of LLM inference serving.

See :mod:`kvsim.api` for the notebook-facing functions re-exported here.

The names are imported when first read (a module ``__getattr__``, PEP 562), so ``import kvsim``
-- and every ``kvsim`` command, which imports this package first -- pays only for what it
touches: ``kvsim validate`` loads no result frames (pandas), reports or calibration code.
"""

from kvsim._version import __version__

__all__ = [
    "__version__", "load_scenario", "parse_scenario", "run", "check", "comparison_table",
    "Scenario", "RunResult", "SpecError",
]

_API = ("load_scenario", "parse_scenario", "run", "check", "comparison_table", "Scenario", "RunResult")


def __getattr__(name: str) -> object:
    if name == "SpecError":
        from kvsim.yaml_io import SpecError as value
    elif name.startswith("_"):  # a probe for a private or special name loads nothing
        raise AttributeError(f"module 'kvsim' has no attribute {name!r}")
    else:
        # the API; and a subpackage read as an attribute (``kvsim.sim`` after ``import kvsim``),
        # there before because this package imported the API eagerly, which brings it
        # not ``from kvsim import api``: that would ask this function for ``api``; read as globals()["api"]
        import kvsim.api  # noqa: F401

        if name in _API:
            value = getattr(globals()["api"], name)
        elif name in globals():
            return globals()[name]
        else:
            raise AttributeError(f"module 'kvsim' has no attribute {name!r}")
    globals()[name] = value  # later reads are plain lookups (and a patched value stays as set)
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
