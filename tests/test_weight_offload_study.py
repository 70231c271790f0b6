"""The weight-offload study (issue 28 item 4): its one-card scenario is what its page says it is
(every offload share with and without early exit, the exit profile the one docs/early_exit.md
fits), and the page and figure benchmarks/weight_offload_study.py writes from two short runs
star every figure of a point that is not steady state, convert to per-dollar figures by the
cost per hour, and read (tests/figure_checks.py)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

import kvsim
from kvsim.report.files import write_results

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(Path(__file__).parent))
import early_exit_flexee  # noqa: E402
import weight_offload_study as study  # noqa: E402
from figure_checks import layout_problems  # noqa: E402

FLEXEE = ROOT / "scenarios" / "weight_offload_flexee.yaml"
DATACENTER = ROOT / "scenarios" / "weight_offload.yaml"
OFFLINE = ROOT / "scenarios" / "weight_offload_offline.yaml"


def test_every_share_runs_with_and_without_the_fitted_exit_profile():
    spec = kvsim.load_scenario(FLEXEE).spec
    seen = set()
    for name, system in spec.systems.items():
        if name.endswith("-exit"):
            continue
        twin = spec.systems[name + "-exit"]
        assert twin.model == system.model and twin.instance == system.instance  # only the exits differ
        assert system.engine is None or system.engine.early_exit is None
        exits = twin.engine.early_exit
        q = exits.distribution[0]
        assert exits.exit_layers == (8, 16, 24, 32) and exits.distribution[:3] == (q, q, q)
        # the share docs/early_exit.md fits to FlexEE's 0 % point, to the scenario's three decimals
        fitted = early_exit_flexee.fit_q(system.model, "rtx-4090", early_exit_flexee.FLEXEE[system.model][0.0])
        assert q == pytest.approx(fitted, abs=5e-4)
        seen.add((system.model, study._share(spec, name)))
    assert seen == {(m, s) for m in ("llama-2-7b", "llama-3.1-8b") for s in (0.0, 0.25, 0.5, 0.75)}


def _short(path: Path, out: Path, systems: list[str], changes: dict) -> Path:
    """A short run of ``systems`` of the scenario at ``path``, its results written into ``out``."""
    scenario = kvsim.load_scenario(path)
    kept = {name: scenario.raw["systems"][name] for name in systems}
    result = kvsim.run(scenario.with_changes({"systems": kept, "compare": None, **changes}))
    write_results(result, out)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wo")
    flexee = _short(FLEXEE, tmp / "flexee", ["7b-off0", "7b-off0-exit", "7b-off25", "7b-off25-exit"],
                    {"duration": "150 s", "warmup": "5 s"})
    datacenter = _short(DATACENTER, tmp / "dc", ["l20-tp4", "l20-tp2-offload"],
                        {"duration": "40 s", "warmup": "5 s", "sweep": {"workload.arrival.rate": ["0.25/s", "2/s"]}})
    offline = _short(OFFLINE, tmp / "offline", ["l20-tp4", "l20-tp4-offload"],
                     {"duration": "60 s", "warmup": "5 s", "sweep": {"workload.arrival.clients": [2, 8]}})
    return flexee, datacenter, offline


def test_the_page_stars_what_is_not_steady_and_prices_by_the_hour(runs):
    flexee, datacenter, offline = runs
    text = study.page(flexee, datacenter, offline)
    summary = json.loads((datacenter / "summary.json").read_text(encoding="utf-8"))
    rows = [line for line in text.splitlines() if line.startswith("| l20-")]
    checked = 0
    for point in summary["points"]:
        section = text.split(f"= {point['params']['workload.arrival.rate']}\n", 1)[1].split("###", 1)[0]
        for name, run in point["systems"].items():
            row = next(r for r in section.splitlines() if r.startswith(f"| {name} |"))
            cells = row.strip("|").split("|")[2:-1]  # the figures, not the name, layout or preemptions
            if run["flags"]:
                assert all(cell.strip().split(" (")[0].endswith("\\*") for cell in cells), row
                assert all(flag in row for flag in run["flags"])
            else:
                assert "\\*" not in row
            # requests per dollar: goodput (1/s) times the 3,600 s an hour's cost buys
            per_usd = run["goodput_requests_per_s"] * 3600 / run["cost"]["cost_per_hour_usd"]
            assert cells[1].strip().removesuffix("\\*") == study._num(per_usd)
            tokens_per_usd = run["output_tokens_per_s"] * 3600 / run["cost"]["cost_per_hour_usd"]
            assert cells[3].strip().removesuffix("\\*") == study._num(tokens_per_usd)
            checked += 1
    assert checked == 4 and rows
    # the offloaded system streams 40 layers at 34 ms each: no decode step under 1.37 s, so a
    # 100 ms TPOT SLO is met by none of its requests
    offloaded = [p["systems"]["l20-tp2-offload"] for p in summary["points"]]
    assert all(run["goodput_requests_per_s"] == 0 and run["tpot_s"]["p50"] > 1.37 for run in offloaded)


def test_the_one_card_rows_compare_like_with_like(runs):
    flexee = runs[0]
    summary = json.loads((flexee / "summary.json").read_text(encoding="utf-8"))
    rows = study.one_card_rows(summary, kvsim.load_scenario(flexee / "scenario.yaml"))
    assert [(r["model"], r["share"]) for r in rows] == [("llama-2-7b", 0.0), ("llama-2-7b", 0.25)]
    for r in rows:
        assert r["speed_up"] > 1.0  # the exits shorten every request
        # end to end (prefill runs every layer) gains no more than the decode step alone
        assert r["speed_up"] <= r["step_speed_up"] * 1.01
    assert rows[0]["flexee"] == 1.27 and rows[1]["flexee"] is None  # FlexEE reports 0 and 50 % only


def test_the_offline_table_marks_each_systems_best_concurrency(runs):
    text = study.page(*runs)
    offline = text.split("## Offline", 1)[1]
    summary = json.loads((runs[2] / "summary.json").read_text(encoding="utf-8"))
    for name in ("l20-tp4", "l20-tp4-offload"):
        row = next(r for r in offline.splitlines() if r.startswith(f"| {name} |"))
        cells = row.strip("|").split("|")[2:]
        assert len(cells) == 2 and sum("**" in c for c in cells) == 1
        per_usd = [p["systems"][name]["output_tokens_per_s"] * 3.6 / p["systems"][name]["cost"]["cost_per_hour_usd"]
                   for p in summary["points"]]  # thousands of output tokens per dollar
        assert "**" in cells[per_usd.index(max(per_usd))]


def test_the_figure_reads(runs, tmp_path):
    fig = study.figure(*runs, tmp_path / "weight_offload.png")
    assert layout_problems(fig) == []
    assert (tmp_path / "weight_offload.png").stat().st_size > 10_000
    titles = [ax.get_title() for ax in fig.axes]
    assert any(re.search("goodput per \\$", t) for t in titles)
