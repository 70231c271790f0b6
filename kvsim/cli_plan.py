"""``kvsim plan``'s command: read the question (a scenario file, or quick-mode arguments written out
as one), run the plan into its results folder and print the answer."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from pathlib import Path

from kvsim.cli_output import EXIT_BAD_INPUT, prepare_out, print_warnings, safe_name, say

__all__ = ["plan_command", "quick_scenario"]


def plan_command(args: argparse.Namespace) -> int:
    """``kvsim plan``: a scenario file with a ``plan:`` section, or a question asked with --model,
    --target, --slo and --candidates (quick mode); the answer printed, the results written."""
    from kvsim.plan.command import run_plan
    from kvsim.report.manifest import PLAN_FILES, PLAN_OUTPUTS, finish_results
    from kvsim.report.plan_report import summary_paragraph
    from kvsim.scenario.load import load_scenario
    from kvsim.sim import check_scenario

    quick_text = None
    asked = [name for name in ("model", "slo", "candidates") if getattr(args, name) is not None] + \
        (["target"] if args.target else [])
    if args.scenario is None:
        quick_text = quick_scenario(args, asked)
        if quick_text is None:
            return EXIT_BAD_INPUT
        from kvsim.scenario.load import parse_scenario

        scenario = parse_scenario(quick_text, "<kvsim plan arguments>", overrides=args.overrides)
    elif asked:
        print(f"kvsim plan: give a scenario file or ask on the command line, not both (--{asked[0]} with "
              f"{args.scenario})", file=sys.stderr)
        return EXIT_BAD_INPUT
    else:
        scenario = load_scenario(args.scenario, args.overrides)
    if args.seed is not None:
        scenario = scenario.with_changes({"seed": args.seed})
    scenario = dataclasses.replace(scenario, watchdog_s=args.watchdog_s)
    args.root_seed = scenario.spec.seed
    if scenario.spec.plan is None:
        print(f"kvsim plan: {args.scenario}: the scenario has no plan: section (targets, candidates, units); "
              f"see docs/planning.md", file=sys.stderr)
        return EXIT_BAD_INPUT
    check_scenario(scenario)  # refuse what cannot run before touching the filesystem
    print_warnings("plan", scenario)
    out = args.out if args.out is not None else Path("results") / safe_name(scenario.name)
    refused = prepare_out("plan", out, scenario.name, PLAN_OUTPUTS, args.overwrite)  # before a long search
    if refused is not None:
        return refused
    if quick_text is not None:  # the question as a file: `kvsim plan OUT/scenario.yaml` gives the same answer
        say("the scenario this question stands for (kept as " + str(out / "scenario.yaml") + "):")
        print(quick_text, end="")
        from kvsim.atomic import write_atomic

        write_atomic(out / "scenario.yaml", lambda path: path.write_text(quick_text, encoding="utf-8"))
    from kvsim.plan import ExecutorError

    try:
        answer = run_plan(scenario, out, workers=args.workers, dask=args.dask, scheduler=args.scheduler,
                          log=(lambda line: None) if args.no_progress else None)
    except ExecutorError as exc:
        print(f"kvsim plan: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # the plan's own files only: a plan_*.png of the user's is not kvsim's to list (and remove later)
    written = [out / name for name in PLAN_FILES if (out / name).is_file()]
    written += [out / name for row in answer.get("deployment") or () for name in row["files"]]
    if quick_text is not None:
        written.append(out / "scenario.yaml")
    finish_results(out, written, scenario.name, scenario.spec.seed)
    say(summary_paragraph(answer))
    print(f"report written: {out / 'plan.html'} and {out / 'plan.md'} (answer: {out / 'plan.json'})")
    return 0


def quick_scenario(args: argparse.Namespace, asked: list[str]) -> str | None:
    """The scenario text of a quick-mode question, or None (the problem printed) if it is incomplete or wrong."""
    from kvsim.hardware import node_catalog, pool_node_catalog
    from kvsim.models import model_catalog
    from kvsim.plan.quick import QuickError, parse_candidates, parse_slo, parse_targets, quick_scenario_text
    from kvsim.yaml_io import did_you_mean

    missing = [f"--{name}" for name in ("model", "target", "slo", "candidates") if name not in asked]
    if missing:
        print("kvsim plan: give a scenario file with a plan: section, or ask on the command line with --model, "
              "--target, --slo and --candidates (missing: " + ", ".join(missing) + "); e.g. kvsim plan --model "
              "qwen3-8b --target 40/s --slo ttft_p99=2s,tpot_p99=100ms --candidates h20-8x,l20-8x+dram=512GiB",
              file=sys.stderr)
        return None
    try:
        models = model_catalog().names()
        if args.model not in models:
            raise QuickError(f"--model: unknown model {args.model!r}{did_you_mean(args.model, models)} "
                             f"(kvsim catalog models lists them)")
        targets = parse_targets(args.target)
        candidates = parse_candidates(args.candidates, node_catalog().names(), pool_node_catalog().names())
        command = "kvsim " + " ".join(shlex.quote(a) for a in args.argv)
        return quick_scenario_text(model=args.model, targets=targets, slo=parse_slo(args.slo),
                                   candidates=candidates, prompt_tokens=args.prompt_tokens,
                                   output_tokens=args.output_tokens, shared_prefix_tokens=args.shared_prefix_tokens,
                                   documents=args.documents, seed=args.seed if args.seed is not None else 1,
                                   max_units=args.max_units, command=command)
    except QuickError as exc:
        print(f"kvsim plan: {exc}", file=sys.stderr)
        return None
