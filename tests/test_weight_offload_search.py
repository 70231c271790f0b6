"""``layout: best`` weighs weight placements (issue 28 item 3): with ``weight_offload_search``
the search also tries each layout offload is modelled for with a share of its layers on the
host, sizes each as a given one would be, and says whether offload paid."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.cli import main
from kvsim.models import model_catalog
from kvsim.models.parallel import Layout
from kvsim.models.weight_offload import layer_bytes_per_card
from kvsim.plan import run_sweep
from kvsim.sim.layout_search import Candidate, Choice, offload_verdict, search_space, with_choice
from kvsim.sim.sizing import SizingError, size_system

# Qwen3-32B in BF16 is 65.6 GB: on 24 GB RTX 4090 cards it needs four cards with every weight in
# HBM, two with half its 64 layers on the host, one with three quarters.
TEXT = """\
name: offload-search
duration: {duration}
warmup: 1 s
model: qwen3-32b
dtype: bf16
workload:
  arrival: {{kind: poisson, rate: 1/s}}
  input_tokens: {{kind: fixed, value: 256}}
  output_tokens: {{kind: fixed, value: 16}}
systems:
  s:
    node: rtx-4090-8x
    instance:
      layout: best
      weight_offload_search: [0.5, 0.75]
"""


@pytest.fixture(scope="module")
def loaded():
    return kvsim.parse_scenario(TEXT.format(duration="4 s"), "s.yaml")


def test_the_space_has_each_in_node_tensor_parallel_layout_with_each_share(loaded):
    (pool, candidates), = search_space(loaded.spec, "s", loaded.catalogs).pools
    labels = [c.label() for c in candidates]
    # every weight in HBM: four cards at least (tp4, tp8, or pipelines of as many cards)
    in_hbm = [c for c in candidates if c.offload is None]
    assert min(c.cards for c in in_hbm) == 4 and "tp2" not in labels and "tp1" not in labels
    # offloaded: TP 2 at half, TP 1 at three quarters (half leaves 32.8 GB on one 24 GB card)
    assert "tp2 offload 0.5" in labels and "tp1 offload 0.75" in labels and "tp1 offload 0.5" not in labels
    # offload is modelled for tensor parallelism inside one node only: no pipeline with it
    assert all(c.layout.plain_tp for c in candidates if c.offload is not None)
    # each layout's all-in-HBM candidate comes before its offloaded ones (ties go to it)
    assert labels.index("tp4") < labels.index("tp4 offload 0.5") < labels.index("tp4 offload 0.75")
    assert search_space(loaded.spec, "s", loaded.catalogs).start.label() == "tp8"


def test_a_candidate_is_sized_as_the_same_given_offload(loaded):
    spec = with_choice(loaded.spec, "s", {"s": Candidate(Layout(tp=2), 0.5)})
    instance = spec.systems["s"].instance
    assert instance.layout == "given" and instance.weight_offload.fraction == 0.5
    assert instance.weight_offload_search == ()
    pool = size_system(spec, "s", loaded.catalogs).pools[0]
    assert pool.stream.offloaded == 32 and pool.instances == 4
    model = model_catalog()["qwen3-32b"]
    # HBM freed: the 32 streamed layers less the two buffers they land in, per card of two
    freed = (32 - 2) * layer_bytes_per_card(model, "bf16", None, 2)
    full = with_choice(loaded.spec, "s", {"s": Candidate(Layout(tp=4))})
    per_card_tp4 = size_system(full, "s", loaded.catalogs).pools[0].weight_bytes_per_card
    # tp2 holds twice tp4's bytes per card of everything, less what it streams
    assert pool.weight_bytes_per_card == pytest.approx(2 * per_card_tp4 - freed, rel=1e-6)


def _choice(label_layout: Layout, offload: float | None = None) -> Choice:
    return Choice((("s", Candidate(label_layout, offload)),), several=False)


def test_the_verdict_by_hand():
    tp4, tp2_half, tp4_half = _choice(Layout(tp=4)), _choice(Layout(tp=2), 0.5), _choice(Layout(tp=4), 0.5)
    # an offloaded winner on fewer cards per instance than the best all-in-HBM layout
    v = offload_verdict([(3.0, tp2_half), (2.5, tp4)], tp2_half)
    assert v["verdict"] == "saves_cards" and v["best_in_hbm"] == "tp4" and v["best_in_hbm_goodput_rps"] == 2.5
    assert "2 card(s) per instance" in v["text"] and "tp4 on 4" in v["text"]
    # on as many cards: the freed HBM held KV
    assert offload_verdict([(3.0, tp4_half), (2.5, tp4)], tp4_half)["verdict"] == "pays"
    # an all-in-HBM winner
    v = offload_verdict([(3.0, tp4), (1.0, tp2_half)], tp4)
    assert v["verdict"] == "slows_decode" and v["best_offloaded"] == "tp2 offload 0.5"
    assert "won the finals" not in v["text"]
    # the finals crowned another all-in-HBM layout than the best pilot: the text names the winner
    tp2_pp2 = _choice(Layout(tp=2, pp=2))
    v = offload_verdict([(3.0, tp4), (2.8, tp2_pp2), (1.0, tp2_half)], tp2_pp2)
    assert v["verdict"] == "slows_decode" and v["best_in_hbm"] == "tp4"
    assert v["text"].startswith("offload only slows decode here: tp2 pp2 won the finals")
    # nothing fits in HBM alone
    assert offload_verdict([(1.0, tp2_half)], tp2_half)["verdict"] == "only_fit"
    # nothing completed in any pilot: no verdict a planner could act on
    assert offload_verdict([(0.0, tp2_half), (0.0, tp4)], tp2_half)["verdict"] == "undecided"
    # no offloaded pilot: nothing to say
    assert offload_verdict([(3.0, tp4)], tp4) is None


def test_a_run_says_whether_offload_paid(tmp_path):
    scenario = kvsim.parse_scenario(TEXT.format(duration="6 s").replace("value: 16", "value: 4"), "s.yaml")
    run = run_sweep(scenario, tmp_path, workers=1, log=False).run("s")
    search = run.summary["layout_search"]
    offload = search["weight_offload"]
    assert offload["verdict"] in {"saves_cards", "pays", "slows_decode"}
    assert offload["best_in_hbm_goodput_rps"] > 0  # the window is long enough for requests to complete
    assert (offload["verdict"] == "slows_decode") == ("offload" not in search["chosen"])
    # the pilots compared are the ones the search kept
    assert search["pilot"][offload["best_offloaded"]] == offload["best_offloaded_goodput_rps"]
    assert search["pilot"][offload["best_in_hbm"]] == offload["best_in_hbm_goodput_rps"]
    # the run is sized at the chosen placement
    pool = run.sizing.pools[0]
    assert (pool.stream is not None) == ("offload" in search["chosen"])


def _validate(tmp_path, capsys, text: str) -> tuple[int, str]:
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    rc = main(["validate", str(path)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err


def test_what_the_search_refuses_names_the_field(tmp_path, capsys):
    base = TEXT.format(duration="4 s")
    rc, err = _validate(tmp_path, capsys, base.replace("layout: best", "tp: 4"))
    assert rc == 2 and "instance.weight_offload_search" in err and "layout: best" in err
    rc, err = _validate(tmp_path, capsys, base.replace("      layout: best\n",
                                                       "      layout: best\n      weight_offload: {fraction: 0.5}\n"))
    assert rc == 2 and "weight_offload_search" in err and "not both" in err
    rc, err = _validate(tmp_path, capsys, base.replace("qwen3-32b", "qwen3-235b-a22b").replace("rtx-4090-8x", "h20-8x")
                        .replace("bf16", "fp8"))
    assert rc == 0, err  # an MoE model: its cold experts offloaded (tests/test_weight_offload_moe.py)
    rc, err = _validate(tmp_path, capsys, base.replace("[0.5, 0.75]", "[0.5, 1.5]"))
    assert rc == 2 and "weight_offload_search" in err


def test_without_a_search_list_the_space_is_unchanged(loaded):
    plain = kvsim.parse_scenario(TEXT.format(duration="4 s").replace("      weight_offload_search: [0.5, 0.75]\n", ""),
                                 "s.yaml")
    (_, candidates), = search_space(plain.spec, "s", plain.catalogs).pools
    assert all(c.offload is None for c in candidates)
    with pytest.raises(SizingError):
        size_system(with_choice(plain.spec, "s", {"s": Candidate(Layout(tp=2))}), "s", plain.catalogs)


def test_deploy_names_weight_offload_as_not_written():
    from kvsim.plan.deploy_map import engine_groups

    text = TEXT.format(duration="4 s").replace("      layout: best\n      weight_offload_search: [0.5, 0.75]\n",
                                               "      tp: 2\n      weight_offload: {fraction: 0.5}\n")
    _, gaps = engine_groups(kvsim.parse_scenario(text, "s.yaml"), "s", 1)
    (gap,) = [g for g in gaps if g.field.endswith("weight_offload")]
    assert gap.field == "systems.s.instance.weight_offload" and "fraction=0.5" in gap.value
    assert "not written" in gap.why and "--cpu-offload-gb" in gap.why


def test_a_searched_points_wall_time_counts_every_pilot(tmp_path, monkeypatch):
    # the sweep's "done in" line and the cost model's rates read run.wall_s: with layout: best the
    # point cost every pilot too, not only the winner's run (a 13-minute point once read 1 min 40 s)
    import kvsim.sim.run as run_module

    spent: list[float] = []
    simulate = run_module.simulate_system

    def counted(*args, **kwargs):
        result = simulate(*args, **kwargs)
        spent.append(result.wall_s)
        return result

    monkeypatch.setattr(run_module, "simulate_system", counted)
    scenario = kvsim.parse_scenario(TEXT.format(duration="6 s").replace("value: 16", "value: 4"), "s.yaml")
    run = run_sweep(scenario, tmp_path, workers=1, log=False).run("s")  # one worker: in this process
    assert len(spent) >= 3  # pilots of several layouts, then the winner
    assert run.wall_s == pytest.approx(sum(spent))
    assert run.wall_s > max(spent)
