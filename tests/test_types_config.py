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


def test_the_checked_files_are_exactly_the_strict_modules() -> None:
    config = _mypy()
    files = config["files"]
    assert files and all((ROOT / f).is_file() for f in files)  # each listed file exists
    strict = [o for o in config["overrides"] if o.get("strict") is True]
    assert len(strict) == 1
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
