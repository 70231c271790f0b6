"""What ``engine.collectives: measured`` would do to the validation page's datasheet errors.

    .venv/bin/python benchmarks/collectives_validation.py [--collectives alpha_beta|measured|measured_nccl]
        [--host-terms-off] [--no-host-overlap] [--no-tokenizer-batch] [--json out.json] [--skip-runs]

Recomputes the datasheet predictions of every unit of ``docs/validation_results.csv`` (the
Splitwise step-table points on H100 and A100 in closed form; the 13 vLLM H100 serving runs as
full-length simulations, minutes) with the measured collective curves, and prints the median
|error| per set, tensor-parallel degree and metric next to the committed alpha-beta ones. The
alpha-beta column is the committed CSV's, which ``tests/test_validation_gate.py`` keeps equal to
today's model. Nothing is fitted; the page itself is not regenerated. ``--collectives alpha_beta
--no-host-overlap --no-tokenizer-batch --json docs/host_work_added.json`` writes the engine as
kvsim ran it before session 23 (the host's per-step work added to every step, no micro-batching
tokeniser), ``--collectives alpha_beta --no-tokenizer-batch --json docs/host_overlap_only.json``
the host overlapped alone, and ``--collectives alpha_beta --host-terms-off --json
docs/host_terms_bound.json`` the bound with no host work at all: ``docs/explanation/whole-step.md``
quotes them (``benchmarks/whole_step.py`` reads them).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARED = REPO.parent / "shared"
VLLM_RUNS = SHARED / "calibration" / "vllm_h100_runs.csv"
STEP_TABLE = SHARED / "traces" / "splitwise_sim_perf_model.csv"
RESULTS = REPO / "docs" / "validation_results.csv"


def measured_by_default(collectives: str) -> None:
    """Make ``engine.collectives`` default to ``collectives`` in this process (the predictors build
    their engines from defaults and scenario files that do not name the field)."""
    from kvsim.models.engine import EngineSpec

    EngineSpec.model_fields["collectives"].default = collectives
    EngineSpec.model_rebuild(force=True)
    assert EngineSpec().collectives == collectives


def host_terms_off() -> None:
    """Make the engine's per-step host terms default to 0 in this process (``--host-terms-off``):
    vLLM's async scheduling would hide them behind the GPU if they all overlapped it."""
    from kvsim.models.engine import EngineSpec

    for field in ("step_fixed_s", "step_per_seq_s", "step_per_token_s"):
        EngineSpec.model_fields[field].default = 0.0
    EngineSpec.model_rebuild(force=True)
    assert EngineSpec().step_fixed_s == 0.0


def host_overlap_off() -> None:
    """Make ``engine.host_overlap`` default to false in this process (``--no-host-overlap``): the
    host's per-step work added to every step, as kvsim did before session 23."""
    from kvsim.models.engine import EngineSpec

    EngineSpec.model_fields["host_overlap"].default = False
    EngineSpec.model_rebuild(force=True)
    assert not EngineSpec().overlaps_host


def tokenizer_batch_off() -> None:
    """Reproduce the vLLM runs without their engine's micro-batching tokeniser
    (``--no-tokenizer-batch``): no engine version gets it in this process."""
    import kvsim.calibration.runs as runs

    runs.MICROBATCH_TOKENIZER_VERSIONS = ((0, 0, 0), (0, 0, 0))
    assert not runs.engine_settings("vLLM", "0.15.1")


def predictions(skip_runs: bool) -> list[dict]:
    from kvsim.calibration.calibrate import _predict_one, load_units

    rows = []
    sets = [("splitwise-h100", STEP_TABLE, "h100-sxm"), ("splitwise-a100", STEP_TABLE, "a100-sxm")]
    if not skip_runs:
        sets.append(("vllm-h100", VLLM_RUNS, "h100-sxm"))
    for dataset, path, card in sets:
        _, units, _ = load_units([path], card)
        for unit in units:
            uid, predicted = _predict_one((unit, {}, 1.0))
            for metric, value in predicted.items():
                rows.append({"dataset": dataset, "unit": uid, "tp": unit.row.tp, "metric": metric, "measured_model": value})
            print(f"{dataset} {uid} done", file=sys.stderr, flush=True)
    return rows


def table(frame: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (dataset, tp, metric), g in frame.groupby(["dataset", "tp", "metric"]):
        old = (g.datasheet / g.measured - 1).abs()
        new = (g.measured_model / g.measured - 1).abs()
        out.append({"set": dataset, "tp": tp, "metric": metric, "n": len(g),
                    "alpha_beta_median": float(old.median()), "measured_median": float(new.median()),
                    "alpha_beta_signed": float((g.datasheet / g.measured - 1).median()),
                    "measured_signed": float((g.measured_model / g.measured - 1).median())})
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collectives", default="measured", choices=("alpha_beta", "measured", "measured_nccl"))
    parser.add_argument("--host-terms-off", action="store_true",
                        help="also set the engine's per-step host terms (step_fixed_s, step_per_seq_s, "
                             "step_per_token_s) to 0: a bound on what they cost the per-token errors")
    parser.add_argument("--no-host-overlap", action="store_true",
                        help="run the engine with host_overlap false (the host's per-step work added to every step)")
    parser.add_argument("--no-tokenizer-batch", action="store_true",
                        help="reproduce the vLLM runs without vLLM 0.10-0.23's micro-batching tokeniser")
    parser.add_argument("--json", type=Path, help="write the per-unit predictions and the table here")
    parser.add_argument("--skip-runs", action="store_true", help="only the step tables (seconds, not minutes)")
    parser.add_argument("--table", action="store_true", help="print the time-by-message-size table and stop")
    parser.add_argument("--moves", action="store_true", help="print each shipped multi-card pool's step times and stop")
    args = parser.parse_args(argv)
    if args.table:
        print(size_table())
        return 0
    if args.moves:
        print(step_moves())
        return 0
    measured_by_default(args.collectives)
    if args.host_terms_off:
        host_terms_off()
    if args.no_host_overlap:
        host_overlap_off()
    if args.no_tokenizer_batch:
        tokenizer_batch_off()
    new = pd.DataFrame(predictions(args.skip_runs))
    committed = pd.read_csv(RESULTS, dtype={"unit": str})
    frame = committed.merge(new, on=["dataset", "unit", "metric"])
    summary = table(frame)
    pd.set_option("display.width", 200)
    print(summary.to_string(index=False, float_format=lambda v: f"{v:+.3f}" if v < 0 else f"{v:.3f}"))
    for dataset, g in frame.groupby("dataset"):
        for metric, h in g.groupby("metric"):
            old = float((h.datasheet / h.measured - 1).abs().median())
            newm = float((h.measured_model / h.measured - 1).abs().median())
            print(f"{dataset:15s} {metric:14s} all TP  n={len(h):3d}  alpha-beta {old:6.1%}  measured {newm:6.1%}")
    if args.json:
        args.json.write_text(json.dumps({"units": frame.to_dict(orient="records"),
                                         "table": summary.to_dict(orient="records")}, indent=1, default=float))
    return 0


def size_table(ranks_list: tuple[int, ...] = (2, 8)) -> str:
    """Markdown: one all-reduce's time by message size, alpha-beta (the card's catalog figures)
    against the measured curve, per interconnect (``--table``)."""
    from kvsim.hardware import accelerator_catalog, node_catalog
    from kvsim.models.collective_curves import collective_curves
    from kvsim.models.collectives import allreduce_s
    from kvsim.models.parallel import Layout, group_allreduce_s
    from kvsim.sim.layout_links import layout_links

    cards = accelerator_catalog()
    sizes = [(16384, "16 KiB (1 token)"), (524288, "512 KiB (32-seq decode)"), (4 * 2**20, "4 MiB"),
             (128 * 2**20, "128 MiB (8k-token prefill)")]
    rows = ["| interconnect (card for alpha-beta) | cards | " + " | ".join(label for _, label in sizes) + " |",
            "|---|---:|" + "---:|" * len(sizes)]
    curves = collective_curves()
    examples = {"nvlink4-nvswitch": "h100-sxm", "nvlink4-nvswitch-nccl": "h100-sxm", "nvlink3-nvswitch": "a100-sxm",
                "pcie-gen4": "l20", "pcie-gen5": None, "ub": "ascend-950dt", "roce-ib": "h100-sxm"}
    for name, card in examples.items():
        icn = curves.get(name)
        for ranks in ((16,) if name == "roce-ib" else ranks_list):
            cells = []
            for nbytes, _ in sizes:
                new = icn.time_s("all_reduce", nbytes, ranks)
                old = None
                if card is not None and name == "roce-ib":
                    links = layout_links(Layout(tp=16), node_catalog()["h100-8x"], cards[card], 1).stage
                    old = group_allreduce_s(nbytes, links)
                elif card is not None:
                    acc = cards[card]
                    old = allreduce_s(nbytes, ranks, acc.efficiency.collective_latency_s,
                                      acc.peer_bandwidth * acc.efficiency.interconnect)
                cells.append(f"{old * 1e6:,.1f} -> {new * 1e6:,.1f}" if old is not None else f"- -> {new * 1e6:,.1f}")
            rows.append(f"| {name} ({card or 'none in the catalog'}) | {ranks} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def step_moves() -> str:
    """Markdown: per shipped scenario and multi-card pool, one decode step (32 sequences of 2,048
    context tokens) and one 2,048-token prefill iteration, alpha-beta against measured (``--moves``):
    what flipping the default would move, before any queueing."""
    import dataclasses

    import kvsim
    from kvsim.models.step_time import BatchShape
    from kvsim.sim.sizing import size_system

    decode = BatchShape(decode_seqs=32, decode_context_tokens=32 * 2048, sampled_seqs=32)
    prefill = BatchShape(prefill_tokens=2048, prefill_seqs=1, sampled_seqs=1,
                         prefill_pairs=BatchShape.prefill_chunk_pairs(2048, 0))
    rows = ["| scenario | model | card | layout | decode step ms (alpha-beta -> measured) | "
            "prefill 2k ms (alpha-beta -> measured) |", "|---|---|---|---|---:|---:|"]
    seen = set()
    for path in sorted((REPO / "scenarios").glob("*.yaml")):
        scenario = kvsim.load_scenario(path)
        for system in scenario.system_names:
            try:
                sizing = size_system(scenario.spec, system, scenario.catalogs)
            except Exception as problem:  # a system the first point cannot size: say so, go on
                print(f"{path.stem} {system}: {problem}", file=sys.stderr)
                continue
            for pool in sizing.pools:
                if pool.layout.cards <= 1:
                    continue
                times = []
                for mode in ("alpha_beta", "measured"):
                    engine = pool.engine.model_copy(update={"collectives": mode})
                    step = dataclasses.replace(pool, engine=engine).step_model()
                    times.append((step.iteration_time_s(decode) * 1e3, step.iteration_time_s(prefill) * 1e3))
                (d0, p0), (d1, p1) = times
                row = (f"| {path.stem} | {pool.model.name} | {pool.accelerator.name} | "
                       f"{pool._layout_text()} | {d0:.2f} -> {d1:.2f} ({d1 / d0 - 1:+.0%}) | "
                       f"{p0:.1f} -> {p1:.1f} ({p1 / p0 - 1:+.0%}) |")
                if row not in seen:  # systems of a study that differ in other ways
                    seen.add(row)
                    rows.append(row)
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
