"""The import layers (docs/architecture.md#layers): pyproject.toml's import-linter contracts hold.

A lower layer never imports an upper one, typing-only imports included; the exceptions are the
contracts' ``ignore_imports`` lines, each with its reason. The contracts are also shown to break
on an upward import added to the real graph, so a kept contract means something.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import grimp
import pytest
from importlinter.api import read_configuration
from importlinter.application.use_cases import lint_imports
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.contracts.layers import LayersContract

from kvsim.backend_kernels import KERNELS

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = str(ROOT / "pyproject.toml")


@pytest.fixture(scope="module")
def config() -> dict:
    return read_configuration(PYPROJECT)


@pytest.fixture(scope="module")
def graph(config: dict) -> grimp.ImportGraph:
    options = config["session_options"]
    assert str(options["exclude_type_checking_imports"]).lower() == "false"  # typing-only imports count
    return grimp.build_graph(*options["root_packages"], exclude_type_checking_imports=False, cache_dir=None)


def _contract(config: dict, contract_id: str) -> LayersContract | ForbiddenContract:
    (options,) = [c for c in config["contracts_options"] if c["id"] == contract_id]
    kind = {"layers": LayersContract, "forbidden": ForbiddenContract}[options["type"]]
    return kind(name=options["name"], session_options=config["session_options"], contract_options=options)


def test_contracts_are_kept(capsys: pytest.CaptureFixture[str]) -> None:
    kept = lint_imports(config_filename=PYPROJECT, cache_dir=None, no_logo=True)
    assert kept, "an import breaks the layers (fix the import, or record why in pyproject.toml):\n" + capsys.readouterr().out


@pytest.mark.parametrize(("contract_id", "importer", "imported"), [
    ("layers", "kvsim.kv.store", "kvsim.sim.run"),                      # a component library reaching up
    ("layers", "kvsim.models.llm", "kvsim.network.topology"),           # one component library into another
    ("layers", "kvsim.units", "kvsim.hardware.specs"),                  # the foundation reaching up
    ("layers", "kvsim.sim.build", "kvsim.report.table"),                # the simulation into its reports
    ("serving", "kvsim.serving.scheduler", "kvsim.serving.router"),     # batching that knows the routers
    ("serving-cache", "kvsim.serving.cache.geometry", "kvsim.serving.cache.instance_cache"),
    ("cache-helpers", "kvsim.serving.cache.writer", "kvsim.serving.cache.instance_cache"),  # a helper into its owner
    ("cache-helpers", "kvsim.serving.cache.domain_pool", "kvsim.serving.cache.extent_cache"),
])
def test_an_upward_import_breaks_a_contract(config: dict, graph: grimp.ImportGraph, contract_id: str,
                                            importer: str, imported: str) -> None:
    contract = _contract(config, contract_id)
    assert contract.check(copy.deepcopy(graph), verbose=False).kept
    broken = copy.deepcopy(graph)
    broken.add_import(importer=importer, imported=imported, line_number=1, line_contents="import")
    assert not contract.check(broken, verbose=False).kept


def test_a_typing_only_import_counts(config: dict, graph: grimp.ImportGraph) -> None:
    # access annotates SystemCache under TYPE_CHECKING: without its ignore line the contract breaks
    contract = _contract(config, "serving-cache")
    line = "kvsim.serving.cache.access -> kvsim.serving.cache.tiers"
    (details,) = graph.get_import_details(importer="kvsim.serving.cache.access", imported="kvsim.serving.cache.tiers")
    lines = (ROOT / "kvsim/serving/cache/access.py").read_text(encoding="utf-8").splitlines()
    block = next(line for line in reversed(lines[:details["line_number"]]) if not line.startswith(" "))
    assert block == "if TYPE_CHECKING:"  # the import sits in a typing-only block
    options = dict(contract.contract_options)
    options["ignore_imports"] = [i for i in options["ignore_imports"] if i != line]
    assert len(options["ignore_imports"]) == len(contract.contract_options["ignore_imports"]) - 1
    stricter = LayersContract(name="stricter", session_options=config["session_options"], contract_options=options)
    assert not stricter.check(copy.deepcopy(graph), verbose=False).kept


def test_no_cache_helper_names_its_owner() -> None:
    # issue 29, item 3: not even in an annotation or a string; the helpers read a CacheMember
    helpers = ["access", "domain_pool", "extent_pool", "prefix_loader", "remote_reads", "swapper", "tiers", "writer"]
    for name in helpers:
        code = (ROOT / "kvsim" / "serving" / "cache" / f"{name}.py").read_text(encoding="utf-8")
        code = re.sub(r":(?:class|meth):`[^`]*`", "", code)  # (cross-references in docstrings are fine)
        assert not re.search(r"\bInstanceCache\b|\binstance_cache\b", code), name


def test_the_backend_exception_is_exactly_its_kernels(config: dict) -> None:
    (options,) = [c for c in config["contracts_options"] if c["id"] == "layers"]
    loaded = {line.split("->")[1].strip() for line in options["ignore_imports"]
              if line.split("->")[0].strip() == "kvsim.backend"}
    assert loaded == set(KERNELS)


def test_the_architecture_page_names_only_files_that_exist() -> None:
    # docs/architecture.md is the map of the code: a renamed or removed file must not stay on it
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`((?:kvsim|tests|docs|benchmarks|scenarios)/[^`\s]*)`", text))
    assert len(named) > 100
    assert sorted(p for p in named if not (ROOT / p).exists()) == []
