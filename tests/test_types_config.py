"""The type-checking setup (issue 29, item 4): pyproject.toml's [tool.mypy] checks exactly the
modules it holds to ``strict``, and `.ci/run` runs it after the tests.

mypy itself is a ``dev`` dependency, run by `.ci/run`, not by this suite: these tests read the
configuration only, so a module added to one list and not the other is caught here.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _mypy() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["mypy"]


def _module(path: str) -> str:
    assert path.endswith(".py") and not path.endswith("__init__.py"), path
    return path.removesuffix(".py").replace("/", ".")


# mypy's --strict (mypy --help), but --warn-redundant-casts, which is global only
STRICT_FLAGS = ("disallow_any_generics", "disallow_subclassing_any", "disallow_untyped_calls",
                "disallow_untyped_defs", "disallow_incomplete_defs", "check_untyped_defs",
                "disallow_untyped_decorators", "warn_unused_ignores", "warn_return_any",
                "no_implicit_reexport", "strict_equality", "extra_checks")


def test_the_checked_files_are_exactly_the_strict_modules() -> None:
    config = _mypy()
    files = config["files"]
    assert files and all((ROOT / f).is_file() for f in files)  # each listed file exists
    assert config["warn_redundant_casts"] is True
    # `strict = true` in an override would hold every module to it (mypy 2.4): the flags instead
    assert not any("strict" in o for o in config["overrides"]) and "strict" not in config
    strict = [o for o in config["overrides"] if any(flag in o for flag in STRICT_FLAGS)]
    assert len(strict) == 1 and all(strict[0][flag] is True for flag in STRICT_FLAGS)
    assert sorted(strict[0]["module"]) == sorted(_module(f) for f in files)
    assert len(set(files)) == len(files)


def test_a_strict_module_is_whole() -> None:
    # a strict module silences no error wholesale: no ignore_errors override names it, and every
    # "type: ignore" in it names its error code
    config = _mypy()
    files = config["files"]
    silenced = {m for o in config["overrides"] if o.get("ignore_errors") for m in o["module"]}
    assert not silenced & {_module(f) for f in files}
    for f in files:
        for number, line in enumerate((ROOT / f).read_text(encoding="utf-8").splitlines(), start=1):
            if "type: ignore" in line:
                assert "type: ignore[" in line, f"{f}:{number}: a bare type: ignore"


def test_ci_runs_mypy_after_the_readme_command() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    readme_command = ".venv/bin/python -m pytest"
    assert readme_command in script and ".venv/bin/mypy" in script
    assert script.index(readme_command) < script.index(".venv/bin/mypy")
    assert "'.[dev]'" in script  # mypy comes from the dev extra
