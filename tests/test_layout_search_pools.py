"""``layout: best`` on a system of several pools (issue 26 item 7): the search goes one pool at a
time (decode first), pilots the sum of the pools' candidates, not their product, and a stored
run's chosen layouts come back."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.cli import main
from kvsim.plan import SweepStats, run_sweep
from kvsim.sim.layout_search import FINALISTS, search_space

PD_BEST = """\
name: pd-best
seed: 3
duration: 12 s
warmup: 2 s
model: qwen3-8b
slo: {ttft_p99: 2 s, tpot_p99: 60 ms}
workload:
  arrival: {kind: poisson, rate: 6/s}
  input_tokens: {kind: uniform, low: 500, high: 3000}
  output_tokens: {kind: uniform, low: 20, high: 200}
systems:
  pd:
    pools:
      prefill: {node: h20-8x, role: prefill, instance: {layout: best}}
      decode: {node: h20-8x, role: decode, instance: {layout: best}}
"""


def _split(label: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in label.split("; "))


@pytest.fixture(scope="module")
def searched():
    scenario = kvsim.parse_scenario(PD_BEST, "s.yaml")
    space = search_space(scenario.spec, "pd", scenario.catalogs)
    return space, kvsim.run(scenario).runs[0]


def test_space_lists_each_pools_layouts_decode_first(searched):
    space, _ = searched
    assert [pool for pool, _ in space.pools] == ["decode", "prefill"]
    # Qwen3-8B on one 8-card node: tp x pp of powers of two dividing 8 (a dense model: no ep/dpa)
    expected = {"tp1", "tp1 pp2", "tp1 pp4", "tp1 pp8", "tp2", "tp2 pp2", "tp2 pp4", "tp4", "tp4 pp2", "tp8"}
    for _, layouts in space.pools:
        assert {lay.label() for lay in layouts} == expected
    # the start is the widest plain tensor parallelism inside one node
    assert space.start.label() == "prefill=tp8; decode=tp8"
    assert space.pilots == 20


def test_the_search_goes_one_pool_at_a_time(searched):
    space, run = searched
    pilots = run.summary["layout_search"]["pilot"]
    labels = [_split(label) for label in pilots]
    first = [lab for lab in labels if lab["prefill"] == "tp8"]
    decode_best = {lab["decode"] for lab in labels if lab["prefill"] != "tp8"}
    # the prefill round ran with one decode layout: the decode round's best pilot
    assert len(decode_best) == 1
    (d_star,) = decode_best
    round_one = {lab["decode"]: pilots[f"prefill=tp8; decode={lab['decode']}"] for lab in first}
    assert len(round_one) == 10 and round_one[d_star] == max(round_one.values())
    # the sum of the candidates, less the one joint choice both rounds meet: not 10 x 10
    assert len(pilots) == space.pilots - 1 == 19


def test_finalists_are_the_best_pilots_and_the_winner_is_the_run(searched):
    _, run = searched
    search = run.summary["layout_search"]
    pilots, finals = search["pilot"], search["final"]
    assert len(finals) == FINALISTS and set(finals) <= set(pilots)
    assert min(pilots[f] for f in finals) >= max(v for k, v in pilots.items() if k not in finals)
    assert finals[search["chosen"]] == max(finals.values())
    layouts = {pool.name: pool.layout.label() for pool in run.sizing.pools}
    assert search["pools"] == layouts == _split(search["chosen"])
    assert run.summary["goodput_requests_per_s"] == finals[search["chosen"]]


def test_a_pool_split_by_roles_cannot_search(tmp_path):
    text = PD_BEST.replace(
        "      prefill: {node: h20-8x, role: prefill, instance: {layout: best}}\n"
        "      decode: {node: h20-8x, role: decode, instance: {layout: best}}\n",
        "      both: {node: h20-8x, roles: {prefill: 2, decode: 6}, instance: {layout: best}}\n")
    with pytest.raises(kvsim.SpecError) as info:
        kvsim.run(kvsim.parse_scenario(text, "s.yaml"))
    assert "roles counts instances" in str(info.value) and "s.yaml:" in str(info.value)


def test_validate_names_each_pools_layouts(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(PD_BEST.replace("layout: best}}\n      decode: {node: h20-8x, role: decode, "
                                    "instance: {layout: best}}", "layout: best}}\n      decode: {node: h20-8x, "
                                    "role: decode, instance: {tp: 2}}"), encoding="utf-8")
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("  pd: qwen3-8b bf16, layout: best for pool(s) prefill, chosen when it runs, one pool at "
                             "a time: pilots of 12 s of at most 10 layout(s), then the best 3 at full length")
    assert out[2].startswith("    pool prefill: 1 x h20-8x, starts at tp8; layouts tried: tp1, ")
    assert out[3].startswith("    pool decode: ") and "tp=2" in out[3]


def test_a_stored_run_comes_back_at_its_chosen_layouts(tmp_path):
    text = PD_BEST.replace("duration: 12 s", "duration: 4 s").replace("warmup: 2 s", "warmup: 1 s")
    scenario = kvsim.parse_scenario(text, "s.yaml")
    fresh = run_sweep(scenario, tmp_path, workers=1, log=False)
    stats = SweepStats()
    resumed = run_sweep(scenario, tmp_path, workers=1, log=False, stats=stats)
    assert stats.ran == []  # every run came back from the results folder
    run = resumed.run("pd")
    assert {p.name: p.layout.label() for p in run.sizing.pools} == \
        {p.name: p.layout.label() for p in fresh.run("pd").sizing.pools}
    assert run.summary["layout_search"]["chosen"] == fresh.run("pd").summary["layout_search"]["chosen"]
