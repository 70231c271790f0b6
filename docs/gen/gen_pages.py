"""Write the generated pages of the docs site (issue 29): nothing on them is typed by hand.

Run from the repository root after changing the scenario schema, the command line, the catalog's
data files or the notebooks::

    .venv/bin/python docs/gen/gen_pages.py          # rewrite the pages
    .venv/bin/python docs/gen/gen_pages.py --check  # exit 1, naming each page, if one is stale

``tests/test_docs_site.py`` runs the check, so a page left stale fails the suite. The pages:

- ``docs/reference/scenario-fields.md``: every field of a scenario file, from the JSON Schema
  ``docs/scenario.schema.json`` (itself written by ``kvsim schema`` from the pydantic models and
  checked against them by ``tests/test_json_schema.py``): type, default, range and the model's own
  docstring for it;
- ``docs/reference/cli.md``: every command and option, from ``kvsim.cli``'s argparse parser;
- ``docs/reference/catalog.md``: every accelerator, server, KV pool node and model shipped in
  ``kvsim/hardware/data/*.yaml`` and ``kvsim/models/data/models.yaml``, each figure as written in
  the file, with the source the file gives for it;
- the table of ``docs/explanation/ep-decode.md`` (``gen_ep_decode.py``: kvsim's step model of a
  large-EP decode step);
- the table of ``docs/explanation/supernode-tiers.md`` (``gen_supernode_tiers.py``: Kimi K2 decode
  inside one UB group and over two);
- the block between ``<!-- notebooks -->`` markers of ``docs/tutorials/first-notebook.md``: the
  notebooks under ``notebooks/``, each with its title and the test that executes it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules, when loaded by path (tests)

from gen_ep_decode import ep_decode_block  # noqa: E402
from gen_reference import catalog_page, cli_page, notebooks_block, python_api_page  # noqa: E402
from gen_schema import PROSE, scenario_fields_page  # noqa: E402,F401  (PROSE: for the tests)
from gen_supernode_tiers import tiers_block  # noqa: E402
from gen_text import BANNER, ROOT  # noqa: E402

# ---------------------------------------------------------------------------------------------
# the headline run (README and the first tutorial)

HEADLINE_SCENARIO = "scenarios/h20_vs_l20.yaml"
HEADLINE_DIR = "docs/headline"
HEADLINE_FILES = ("table.txt", "summary.json", "report.md", "report.html", "report_throughput.png",
                  "report_latency.png", "report_cdf.png", "report_cost.png")
"""What ``--headline`` keeps of the run in ``docs/headline/`` (not the per-request records)."""


def run_headline(out: Path) -> None:
    """Run the headline scenario as the README's first command does, into ``out``."""
    import subprocess

    subprocess.run([sys.executable, "-m", "kvsim.cli", "run", str(ROOT / HEADLINE_SCENARIO), "--out", str(out),
                    "--workers", "1", "--no-progress", "--overwrite"], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)


def _flagged(text: str, metrics: dict[str, Any]) -> str:
    return f"{text}\\*" if metrics.get("flags") else text


def _figure(value: float) -> str:
    """Three significant figures, trailing zeros kept (4.90, 0.200, 17.0, 103)."""
    return f"{value:#.3g}".rstrip(".")


def _seconds(value: float) -> str:
    return f"{_figure(value)} s"


def headline_block() -> str:
    """The README's headline table, from the committed run's ``summary.json``: every load up to
    the first at which no system is in steady state."""
    summary = json.loads((ROOT / HEADLINE_DIR / "summary.json").read_text(encoding="utf-8"))
    key = next(iter(summary["sweep"]))
    rows = ["| load | system | goodput /s | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | backlog |",
            "|---:|---|---:|---:|---:|---:|---:|---:|"]
    left_out = []
    for number, point in enumerate(summary["points"]):
        systems = point["systems"]
        load = point["params"][key]
        earlier = summary["points"][:number]
        if any(all(m.get("flags") for m in p["systems"].values()) for p in earlier):
            left_out.append(load)
            continue
        for name in summary["system_names"]:
            m = systems[name]
            cells = [_figure(m["goodput_requests_per_s"]), _seconds(m["ttft_s"]["p50"]), _seconds(m["ttft_s"]["p99"]),
                     f"{_figure(m['tpot_s']['p50'] * 1e3)} ms", f"{_figure(m['tpot_s']['p99'] * 1e3)} ms",
                     f"{m['requests_unfinished']:,}"]
            rows.append(f"| {load} | {name} | " + " | ".join(_flagged(c, m) for c in cells) + " |")
    flags = list(dict.fromkeys(f for p in summary["points"] for m in p["systems"].values() for f in m.get("flags", [])))
    note = (f"Goodput: requests per second completed within the SLO; backlog: requests not finished when "
            f"arrivals stop at {summary['duration_s']:g} s.\n\n"
            f"\\* Flagged `{', '.join(flags)}` by `kvsim run`: not a steady-state number (the backlog grows "
            "through the window); it says \"overloaded\", and its value depends on how long the window was.")
    if left_out:
        note += f" Not shown: {', '.join(left_out)}, where every system is overloaded (in the report)."
    return "\n".join([BANNER.format(source=f"{HEADLINE_DIR}/summary.json"), ""] + rows + ["", note])


# ---------------------------------------------------------------------------------------------

PAGES: dict[str, Callable[[], str]] = {
    "docs/reference/scenario-fields.md": scenario_fields_page,
    "docs/reference/cli.md": cli_page,
    "docs/reference/catalog.md": catalog_page,
    "docs/reference/python-api.md": python_api_page,
}
"""Whole generated pages, by path from the repository root."""

BLOCKS: dict[tuple[str, str], Callable[[], str]] = {
    ("docs/tutorials/first-notebook.md", "notebooks"): notebooks_block,
    ("README.md", "headline-table"): headline_block,
    ("docs/tutorials/first-run.md", "headline-table"): headline_block,
    ("docs/explanation/ep-decode.md", "ep-decode-table"): ep_decode_block,
    ("docs/explanation/supernode-tiers.md", "supernode-tiers-table"): tiers_block,
}
"""Generated blocks inside hand-written pages: (page, marker) -> the text between
``<!-- marker -->`` and ``<!-- /marker -->``."""


def replace_block(page: str, marker: str, text: str) -> str:
    start, end = f"<!-- {marker} -->", f"<!-- /{marker} -->"
    if start not in page or end not in page:
        raise ValueError(f"markers {start} ... {end} not found")
    head, rest = page.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{text}\n{end}{tail}"


def expected() -> dict[str, str]:
    """Every generated file's text as it should be now, by path from the repository root."""
    out = {path: make() for path, make in PAGES.items()}
    for (path, marker), make in BLOCKS.items():
        page = out.get(path) or (ROOT / path).read_text(encoding="utf-8")
        out[path] = replace_block(page, marker, make())
    return out


def stale() -> list[str]:
    """Generated files whose text on disk differs from what they should be."""
    return [path for path, text in expected().items()
            if not (ROOT / path).exists() or (ROOT / path).read_text(encoding="utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated page is stale")
    parser.add_argument("--headline", action="store_true",
                        help=f"first run {HEADLINE_SCENARIO} again and keep its table, summary and report in "
                             f"{HEADLINE_DIR}/ (a few seconds; after a change meant to move numbers)")
    args = parser.parse_args(argv)
    if args.headline and not args.check:
        import shutil
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            run_headline(Path(tmp) / "run")
            (ROOT / HEADLINE_DIR).mkdir(parents=True, exist_ok=True)
            for name in HEADLINE_FILES:
                shutil.copyfile(Path(tmp) / "run" / name, ROOT / HEADLINE_DIR / name)
        print(f"wrote {HEADLINE_DIR}/")
    if args.check:
        paths = stale()
        for path in paths:
            print(f"{path}: stale; run .venv/bin/python docs/gen/gen_pages.py", file=sys.stderr)
        return 1 if paths else 0
    for path, text in expected().items():
        (ROOT / path).parent.mkdir(parents=True, exist_ok=True)
        (ROOT / path).write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
