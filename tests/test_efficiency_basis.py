"""Where each card's efficiency figures come from (issue 27 item 2): the sibling rule on real pairs,
the shipped catalog's bases, and the whole-step check against an engine's benchmark page."""

from __future__ import annotations

import importlib
import sys

import pytest
from pydantic import ValidationError

from conftest import REPO, SHARED
from kvsim.hardware import AcceleratorSpec, accelerator_catalog
from kvsim.hardware.provenance import BASIS_FIGURES, EfficiencyBasis, basis_problems, carried_figure
from kvsim.models.step_time import BatchShape


def _cards(**changed: AcceleratorSpec) -> dict[str, AcceleratorSpec]:
    cards = dict(accelerator_catalog().specs)
    cards.update(changed)
    return cards


def _with(name: str, **fields: object) -> AcceleratorSpec:
    card = accelerator_catalog()[name]
    return card.model_copy(update=fields)


def test_every_shipped_card_states_a_basis_its_rules_reproduce() -> None:
    assert basis_problems(accelerator_catalog().specs, required=True) == []
    kinds = {basis.kind for card in accelerator_catalog().specs.values() for basis in card.efficiency_basis.values()}
    assert kinds == {"measured", "sibling", "assumption"}


def test_every_carried_figure_cites_its_sibling_and_every_ratio_its_measurement() -> None:
    for name, card in accelerator_catalog().specs.items():
        for figure, basis in card.efficiency_basis.items():
            source = card.sources.get(f"efficiency.{figure}", "")
            if basis.kind == "sibling":
                assert basis.card is not None
                sibling = basis.card.split("-")[0].upper()  # l40s -> L40S, h100-sxm -> H100
                assert sibling in source.upper(), (name, figure, source)
            if basis.rule in ("scaled", "gemm_scaled"):
                assert f"{basis.scale}" in source, (name, figure, source)
            if basis.kind == "measured":
                assert source.strip(), f"{name}: efficiency.{figure} is called measured but cites nothing"


def test_same_memory_system_carries_the_l40s_figure_to_the_l20_unchanged() -> None:
    l20, l40s = accelerator_catalog()["l20"], accelerator_catalog()["l40s"]
    basis = l20.efficiency_basis["memory"]
    assert (basis.kind, basis.card, basis.rule) == ("sibling", "l40s", "same_memory_system")
    assert carried_figure(l20, l40s, "memory", basis) == l40s.efficiency.memory == l20.efficiency.memory
    # re-measure the sibling without its dependant: caught, naming the card and the figure
    remeasured = _with("l40s", efficiency=l40s.efficiency.model_copy(update={"memory": 0.9}))
    problems = basis_problems(_cards(l40s=remeasured))
    assert len(problems) == 1 and problems[0].startswith("l20: efficiency.memory") and "0.900" in problems[0]


def test_scaled_rule_multiplies_by_the_measured_ratio() -> None:
    h20, h100 = accelerator_catalog()["h20"], accelerator_catalog()["h100-sxm"]
    basis = h20.efficiency_basis["kv_memory"]
    assert basis.rule == "scaled" and basis.scale == 0.82
    assert carried_figure(h20, h100, "kv_memory", basis) == pytest.approx(0.85 * 0.82)  # 0.697, typed 0.70
    wrong = _with("h20", efficiency_basis={**h20.efficiency_basis, "kv_memory": EfficiencyBasis(
        kind="sibling", card="h100-sxm", rule="scaled", scale=0.9)})
    assert any("0.765" in p for p in basis_problems(_cards(h20=wrong)))


def test_the_rule_refuses_cards_of_another_memory_system_and_chains() -> None:
    l20 = accelerator_catalog()["l20"]
    other = EfficiencyBasis(kind="sibling", card="rtx-4090", rule="same_memory_system")  # GDDR6X, not GDDR6
    problems = basis_problems(_cards(l20=_with("l20", efficiency_basis={**l20.efficiency_basis, "memory": other})))
    assert len(problems) == 1 and "memory_kind" in problems[0]
    with pytest.raises(ValueError, match="architecture"):
        carried_figure(_with("l20", architecture="Ampere"), accelerator_catalog()["l40s"], "memory",
                       l20.efficiency_basis["memory"])
    chained = EfficiencyBasis(kind="sibling", card="l20", rule="same_memory_system")  # l20's own is carried
    l40s = accelerator_catalog()["l40s"]
    problems = basis_problems(_cards(l40s=_with("l40s", efficiency_basis={**l40s.efficiency_basis,
                                                                              "memory": chained})))
    assert any(p.startswith("l40s:") and "no chains" in p for p in problems)
    missing = _with("l40s", efficiency_basis={"memory": l40s.efficiency_basis["memory"]})
    problems = basis_problems(_cards(l40s=missing), required=True)
    assert "l40s: efficiency_basis does not state the basis of compute, kv_memory" in problems
    assert any(p.startswith("l20: efficiency.kv_memory") for p in problems)  # its sibling's basis went too
    assert BASIS_FIGURES == ("compute", "memory", "kv_memory")


def test_gemm_scaled_carries_the_a100_mfu_to_the_h100_bf16_by_the_gemm_ratio() -> None:
    h100, a100 = accelerator_catalog()["h100-sxm"], accelerator_catalog()["a100-sxm"]
    basis = h100.efficiency_basis["compute"]
    assert (basis.card, basis.rule, basis.scale) == ("a100-sxm", "gemm_scaled", 1.04)
    # across architectures (Ampere -> Hopper, HBM2e -> HBM3): the GEMM ratio carries the difference
    assert carried_figure(h100, a100, "compute", basis) == pytest.approx(0.67 * 1.04)  # 0.697, typed 0.70
    assert h100.efficiency.compute_for("bf16") == 0.70
    # FP8 doubles the peak, not the achieved rate: its own measured figure, never carried
    assert h100.efficiency.compute_for("fp8") == 0.35
    with pytest.raises(ValueError, match="carries compute"):
        carried_figure(h100, a100, "memory", basis)
    carried_formats = _with("h100-sxm", efficiency_basis={**h100.efficiency_basis, "compute_formats": EfficiencyBasis(
        kind="sibling", card="a100-sxm", rule="gemm_scaled", scale=1.04)})
    assert any("compute_formats" in p for p in basis_problems(_cards(**{"h100-sxm": carried_formats})))
    # re-measure the A100 without its dependant: caught
    remeasured = _with("a100-sxm", efficiency=a100.efficiency.model_copy(update={"compute": 0.6}))
    problems = basis_problems(_cards(**{"a100-sxm": remeasured}))
    assert len(problems) == 1 and problems[0].startswith("h100-sxm: efficiency.compute") and "0.624" in problems[0]


def test_a_per_format_compute_figure_needs_that_formats_peak() -> None:
    raw = dict(accelerator_catalog().raw["a100-sxm"])  # bf16 only
    raw["efficiency"] = {**raw["efficiency"], "compute_formats": {"fp8": 0.4}}
    with pytest.raises(ValidationError, match="compute_formats names \\['fp8'\\]"):
        AcceleratorSpec.model_validate({**raw, "name": "x"})


@pytest.mark.parametrize("fields, message", [
    ({"kind": "sibling", "rule": "same_memory_system"}, "names the card"),
    ({"kind": "sibling", "card": "l40s", "rule": "same_memory_system", "scale": 0.9}, "only they"),
    ({"kind": "sibling", "card": "l40s", "rule": "scaled"}, "only they"),
    ({"kind": "sibling", "card": "a100-sxm", "rule": "gemm_scaled"}, "only they"),
    ({"kind": "measured", "card": "l40s"}, "belong to a sibling"),
    ({"kind": "guess"}, "kind"),
])
def test_a_malformed_basis_is_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        EfficiencyBasis.model_validate(fields)


def test_a_basis_for_a_figure_that_does_not_exist_is_refused() -> None:
    raw = dict(accelerator_catalog().raw["l40s"])
    raw["efficiency_basis"] = {"bandwidth": {"kind": "measured"}}
    with pytest.raises(ValidationError, match="not efficiency figures"):
        AcceleratorSpec.model_validate({**raw, "name": "x"})


# ------------------------------------------------------------------ whole steps (benchmarks/whole_step.py)

@pytest.fixture(scope="module")
def whole_step():  # type: ignore[no-untyped-def]
    if str(REPO / "benchmarks") not in sys.path:
        sys.path.insert(0, str(REPO / "benchmarks"))
    return importlib.import_module("whole_step")


def test_the_whole_step_page_is_todays_model(whole_step) -> None:  # type: ignore[no-untyped-def]
    committed = (REPO / "docs" / "explanation" / "whole-step.md").read_text(encoding="utf-8")
    expected = whole_step.page(whole_step.rows(), whole_step.splitwise_excess(SHARED / "traces" /
                                                                           "splitwise_sim_perf_model.csv"),
                               whole_step.host_bound_rows(), whole_step.ttft_gaps(), whole_step.p99_rows())
    assert committed == expected, "regenerate: python benchmarks/whole_step.py"


def test_no_measured_run_reads_faster_than_its_bytes_allow(whole_step) -> None:  # type: ignore[no-untyped-def]
    # a row implying more than the peak bandwidth would be a misread table (per GPU vs per run, TP)
    results = whole_step.rows()
    assert len(results) == 12
    decode_rows = [r for r in results if r.decode_share >= whole_step.DECODE_SHARE]
    assert len(decode_rows) == 7  # the page's whole-step fractions are read from these only
    for r in decode_rows:
        assert 0.0 < r.measured_fraction < 1.0, r


def test_a_run_of_one_decode_step_is_the_step_models_iteration(whole_step) -> None:  # type: ignore[no-untyped-def]
    row = {"card": "l40s", "model": "llama-2-7b", "dtype": "fp8", "kv_dtype": "fp8", "batch": "16", "tp": "1",
           "input_tokens": "2048", "output_tokens": "2", "out_tokens_per_s_per_gpu": "100"}
    got = whole_step.predict(row)
    from kvsim.models import model_catalog
    from kvsim.models.step_time import RooflineStepTime

    model = model_catalog()["llama-2-7b"]
    steps = RooflineStepTime(model, accelerator_catalog()["l40s"], 1, "fp8", "fp8",
                             engine=whole_step.trtllm_engine(), graph_max_tokens=16 * 2048)
    one = steps.iteration_time_s(BatchShape(decode_seqs=16, decode_context_tokens=16 * 2049, sampled_seqs=16))
    assert got.decode_s == pytest.approx(one, rel=1e-12)
    weights = model.weight_bytes_read(16, "fp8", {})
    assert got.decode_bytes == pytest.approx(weights + 16 * 2049 * model.kv_bytes_per_token("fp8", 1))
    assert got.measured_s == pytest.approx(16 * 2 / 100)
