"""The docs site (issue 29): its generated pages are current, its figures are the code's, it builds
strictly, and the README stays a front door that lost none of its old content.

- ``docs/gen/gen_pages.py`` writes the reference pages (scenario fields, CLI, catalog, Python API)
  and the generated blocks (the notebook table, the headline table in the README and the first
  tutorial); a page or block that differs from what it writes now is stale and fails here.
- The headline table comes from ``docs/headline/summary.json``; the scenario is re-run in full
  here and its printed table must equal the committed ``docs/headline/table.txt``, so the
  README's numbers are the current code's (``gen_pages.py --headline`` refreshes them).
- ``mkdocs build --strict`` fails on a link to a missing page or anchor and on a page it cannot
  place; it runs here, skipped (saying why) only where MkDocs is not installed.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kvsim

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

RUN_COMMAND = ("python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/kvsim run scenarios/h20_vs_l20.yaml "
               "--out results/h20_vs_l20")
TEST_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest"

FORMER_README_SECTIONS = (
    "What the headline scenario shows",
    "KV-cache offload: how far does it narrow the H20 / L20 gap?",
    "Prefill/decode disaggregation: which pairing, which ratio, which controller?",
    "Cache-aware routing: how close to an infinite cache?",
    "Addressing domains: what is a 128-card pool worth?",
    "LoRA adapters over a shared context: reuse the values or share the bytes?",
    "Capacity planning: what is the cheapest configuration within the SLO?",
    "Scenario files",
    "Command line",
    "Python API",
    "How it works",
    "How fast is it",
    "Evidence",
    "Reliability",
    "Not yet modelled",
)
"""The README's sections before the docs site (commit d61f7a2), each moved to a docs page."""

BENCHMARK_MARKERS = ("speed-table", "routing-table", "run-cost-table", "cost-rates")
"""Blocks that benchmark scripts write between ``<!-- NAME -->`` markers: they belong in docs pages."""


def _gen_pages():
    spec = importlib.util.spec_from_file_location("gen_pages", ROOT / "docs" / "gen" / "gen_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_pages_and_blocks_are_current():
    stale = _gen_pages().stale()
    assert stale == [], f"stale generated docs {stale}: run .venv/bin/python docs/gen/gen_pages.py"


def test_the_headline_table_is_the_current_codes_answer():
    """The committed headline run, whose summary the README's table is generated from, is what the
    scenario gives now: its full printed table, every number of it."""
    result = kvsim.run(kvsim.load_scenario(ROOT / "scenarios" / "h20_vs_l20.yaml"))
    committed = (ROOT / "docs" / "headline" / "table.txt").read_text(encoding="utf-8")
    assert kvsim.comparison_table(result).rstrip("\n") == committed.rstrip("\n"), (
        "docs/headline/ is stale: run .venv/bin/python docs/gen/gen_pages.py --headline")


def test_the_readme_table_quotes_the_committed_run():
    """A number of the README's headline table, read back against the committed summary: the
    table generator cannot drift from the file it reads without this noticing."""
    import json

    summary = json.loads((ROOT / "docs" / "headline" / "summary.json").read_text(encoding="utf-8"))
    first = summary["points"][0]
    h20 = first["systems"]["h20"]
    row = next(line for line in README.read_text(encoding="utf-8").split("\n")
               if line.startswith(f"| {first['params']['workload.arrival.rate']} | h20 |"))
    assert f"| {h20['tpot_s']['p50'] * 1e3:#.3g} ms |" in row
    assert f"| {h20['requests_unfinished']:,} |" in row
    # the ratios the README's bullets quote, from the same run
    l20 = first["systems"]["l20"]
    text = README.read_text(encoding="utf-8")
    tpot_ratio = l20["tpot_s"]["p50"] / h20["tpot_s"]["p50"]
    ttft_ratio = l20["ttft_s"]["p50"] / h20["ttft_s"]["p50"]
    assert f"about {round(tpot_ratio)}× the\n  H20's" in text
    assert f"only about {ttft_ratio:.1f}× the H20's" in text


def test_the_readme_is_a_front_door():
    text = README.read_text(encoding="utf-8")
    assert len(text.split("\n")) < 250
    # the two commands, character for character (.ci/run runs the second verbatim)
    assert f"```bash\n{RUN_COMMAND}\n```" in text
    assert f"```bash\n{TEST_COMMAND}\n```" in text
    assert TEST_COMMAND in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for marker in BENCHMARK_MARKERS:
        assert f"<!-- {marker}" not in text, f"a benchmark writes {marker} into the README: point it at a docs page"
    # no hand-typed test count (it goes stale): the suite says its own count when it runs
    assert not re.search(r"\b\d[\d,]* tests\b", text)


def test_every_link_of_the_readme_reaches_a_file():
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert targets
    missing = [t for t in targets if not re.match(r"^[a-z]+://", t) and not (ROOT / t).exists()]
    assert missing == []


def test_every_former_readme_section_has_a_home_in_the_docs():
    headings = set()
    for page in (ROOT / "docs").rglob("*.md"):
        for line in page.read_text(encoding="utf-8").split("\n"):
            if line.startswith("#"):
                headings.add(re.sub(r"\s*\{#[^}]*\}$", "", line.lstrip("#").strip()))
    missing = [s for s in FORMER_README_SECTIONS if s not in headings]
    assert missing == []


def test_every_notebook_is_executed_by_a_test():
    block = _gen_pages().notebooks_block()
    notebooks = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert notebooks and all(f"notebooks/{name}" in block for name in notebooks)
    assert "**no test**" not in block


def test_mkdocs_builds_strictly(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs and mkdocs-material are not installed (pip install -e '.[test]' installs them)")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    site = tmp_path / "site"
    # the generated reference and a page moved out of the README are in the site
    for page in ("reference/scenario-fields/index.html", "reference/cli/index.html", "reference/catalog/index.html",
                 "how-to/study-offload-gap/index.html", "explanation/physics/index.html"):
        assert (site / page).is_file(), page
    # a repository file a page links to (outside docs/) was copied in, so the link works in the site
    assert (site / "repo" / "scenarios" / "h20_vs_l20.yaml").is_file()


def test_every_object_of_the_scenario_schema_points_to_its_prose():
    """Scenario fields gives each object's fields; where they are explained together is a link
    (gen_pages.PROSE) that a new object must add, so the reference never leaves one bare."""
    import json

    schema = json.loads((ROOT / "docs" / "scenario.schema.json").read_text(encoding="utf-8"))
    assert sorted(set(schema["$defs"]) - set(_gen_pages().PROSE)) == []


def test_the_speed_report_writes_its_table_into_the_docs_not_the_readme(tmp_path):
    """benchmarks/speed.py's table moved from the README to docs/speed.md; the writer refuses the
    README (whose text it would otherwise replace whole) and fills a docs page's markers."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from speed_report import END, START, write_out
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    readme = tmp_path / "README.md"
    readme.write_text("# front door\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        write_out(readme, "| table |")
    assert readme.read_text(encoding="utf-8") == "# front door\n"
    page = tmp_path / "speed.md"
    page.write_text(f"# How fast\n\nbefore\n{START}\nold\n{END}\nafter\n", encoding="utf-8")
    write_out(page, "| table |")
    assert page.read_text(encoding="utf-8") == f"# How fast\n\nbefore\n{START}\n| table |\n{END}\nafter\n"
    assert START in (ROOT / "docs" / "speed.md").read_text(encoding="utf-8")


def test_the_docs_pages_name_only_files_that_exist():
    """A path in backticks on the README or a page written for the site (``kvsim/...``,
    ``scenarios/...``) names a file or folder of the repository, or a pattern that matches one.
    (The older pages under docs/ also name files of other projects, by the same paths.)"""
    pages = [README, ROOT / "docs" / "index.md", ROOT / "docs" / "about-these-docs.md"]
    pages += [page for kind in ("tutorials", "how-to", "reference", "explanation")
              for page in (ROOT / "docs" / kind).glob("*.md")]
    named = {m for page in pages for m in re.findall(
        r"`((?:kvsim|tests|docs|benchmarks|scenarios|notebooks)/[^`\s]*)`", page.read_text(encoding="utf-8"))}
    assert len(named) > 100
    missing = [n for n in sorted(named)
               if not (any(ROOT.glob(n)) if "*" in n else (ROOT / n.split("::")[0].rstrip(":,.")).exists())]
    assert missing == []
