"""Command line: ``kvsim validate | run (sweep) | plan | storage | calibrate | catalog | schema``.

Exit status: 0 success; 2 bad input (scenario files, CLI arguments, folders that cannot be
written), one clear message and never a traceback; 3 an internal error (a bug) or a run the
watchdog stopped, a short report with the command that reproduces it (:mod:`kvsim.crash`).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import sys
from collections.abc import Sequence
from pathlib import Path

# the version from its own module, not the package root (whose lazy API import is no part of the CLI)
from kvsim._version import __version__
from kvsim.cli_catalog import catalog_command
from kvsim.cli_output import EXIT_BAD_INPUT, backend_refused, cut, prepare_out, print_warnings, safe_name, say
from kvsim.cli_plan import plan_command
from kvsim.cli_report import report_command
from kvsim.crash import EXIT_INTERNAL, readers_may_leave, report_uncaught
from kvsim.yaml_io import SpecError

__all__ = ["main", "EXIT_BAD_INPUT", "EXIT_INTERNAL"]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args = parser.parse_args(argv)
    args.argv = argv
    refused = backend_refused(args.command)
    if refused is not None:
        return refused
    # the reader of our output going away (`kvsim run ... | head`) is not an error of ours: the
    # command goes on and a run still writes its results; any BrokenPipeError that reaches here
    # came from elsewhere (a dead worker's pipe) and is a failure like any other
    with readers_may_leave():
        try:
            return args.handler(args)
        except SpecError as exc:  # a problem may quote a field path or name from the file: shown escaped
            say(f"kvsim {args.command}: invalid input", file=sys.stderr)
            for problem in exc.problems:
                say(f"  {cut(problem)}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except KeyboardInterrupt:
            print("kvsim: interrupted", file=sys.stderr)
            return 130
        except Exception as exc:  # noqa: BLE001 - a bug, a stuck run or a full disk: reported, never dumped
            return report_uncaught(exc, args, argv)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvsim", description="Discrete-event simulator of LLM inference serving.")
    parser.add_argument("--version", action="version", version=f"kvsim {__version__}")
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)  # every command takes --debug, before or after its name
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=_DEBUG_HELP)

    validate = sub.add_parser("validate", parents=[common], help="check a scenario file without running it")
    validate.add_argument("scenario", type=Path, help="scenario YAML file")
    _add_set(validate)
    validate.set_defaults(handler=_validate)

    run = sub.add_parser("run", parents=[common], aliases=["sweep"],
                         help="run a scenario (every sweep point, in parallel) and write its results; re-running resumes")
    run.add_argument("scenario", type=Path, help="scenario YAML file")
    run.add_argument("--out", type=Path, default=None,
                     help="results folder (default: results/<scenario name>)")
    run.add_argument("--seed", type=_seed, default=None, help="root seed (overrides the scenario's)")
    _add_set(run)
    run.add_argument("--workers", type=_workers, default=None,
                     help="local processes running sweep points (default: all cores; 1: in this process)")
    run.add_argument("--dask", action="store_true",
                     help="run the points on a Dask LocalCluster of --workers workers (pip install 'kvsim[dask]')")
    run.add_argument("--scheduler", default=None, metavar="ADDRESS",
                     help="run the points on the Dask cluster whose scheduler is at ADDRESS (tcp://host:8786)")
    run.add_argument("--overwrite", action="store_true", help=_OVERWRITE_HELP)
    run.add_argument("--no-progress", action="store_true",
                     help="do not show the progress bar (one line per finished point is still logged)")
    run.add_argument("--no-report", action="store_true",
                     help="do not render report.html / report.md at the end (kvsim report DIR renders it later)")
    _add_watchdog(run)
    run.set_defaults(handler=_run)

    plan = sub.add_parser("plan", parents=[common],
                          help="the cheapest configuration that serves each target load within the SLO")
    plan.add_argument("scenario", type=Path, nargs="?", default=None,
                      help="scenario YAML file with a plan: section (or ask on the command line: --model, "
                           "--target, --slo, --candidates)")
    quick = plan.add_argument_group("a question on the command line (quick mode; the scenario it stands for is "
                                    "printed and written to OUT/scenario.yaml)")
    quick.add_argument("--model", default=None, help="model of the catalog (kvsim catalog models)")
    quick.add_argument("--target", action="append", default=[], metavar="RATE",
                       help="a load to serve, e.g. 40/s (repeatable)")
    quick.add_argument("--slo", default=None, metavar="LIMITS", help="e.g. ttft_p99=2s,tpot_p99=100ms")
    quick.add_argument("--candidates", default=None, metavar="LIST",
                       help="comma-separated NODE[+dram=SIZE][+nvme=SIZE][+pool=POOL_NODE[:N]][+tp=N], "
                            "e.g. h20-8x,l20-8x+dram=512GiB,l20-8x+pool=nvme-storage-16x; the first is the baseline")
    quick.add_argument("--prompt-tokens", type=_workers, default=2048, metavar="N",
                       help="prompt tokens per request (default 2048)")
    quick.add_argument("--output-tokens", type=_workers, default=256, metavar="N",
                       help="answer tokens per request (default 256)")
    quick.add_argument("--shared-prefix-tokens", type=_seed, default=0, metavar="N",
                       help="of the prompt, tokens of a shared document (default 0: none)")
    quick.add_argument("--documents", type=_workers, default=1, metavar="N",
                       help="distinct shared documents, Zipf 0.8 popular (default 1)")
    quick.add_argument("--max-units", type=_workers, default=64, metavar="N",
                       help="most units of a candidate (default 64)")
    plan.add_argument("--out", type=Path, default=None, help="results folder (default: results/<scenario name>)")
    plan.add_argument("--seed", type=_seed, default=None, help="root seed of every probe (overrides the scenario's)")
    _add_set(plan)
    plan.add_argument("--workers", type=_workers, default=None,
                      help="worker processes (default: all cores); also decides how many loads a search probes "
                           "per round, so the answer depends on it alone, never on timing")
    plan.add_argument("--dask", action="store_true",
                      help="run the probes on a Dask LocalCluster of --workers workers (pip install 'kvsim[dask]')")
    plan.add_argument("--scheduler", default=None, metavar="ADDRESS",
                      help="run the probes on the Dask cluster whose scheduler is at ADDRESS (tcp://host:8786)")
    plan.add_argument("--overwrite", action="store_true", help=_OVERWRITE_HELP)
    plan.add_argument("--no-progress", action="store_true",
                      help="do not print a line per finished probe (the answer is still printed)")
    _add_watchdog(plan)
    plan.set_defaults(handler=plan_command)

    report = sub.add_parser("report", parents=[common],
                            help="render the report of a results folder again, from its saved files "
                                 "(kvsim run: summary.json; kvsim plan: plan.json)")
    report.add_argument("results", type=Path, help="results folder of kvsim run (summary.json) or kvsim plan "
                                                   "(plan.json)")
    report.add_argument("--out", type=Path, default=None, help="folder to write into (default: the results folder)")
    report.add_argument("--name", type=_file_stem, default=None,
                        help="file stem of the report files (default: report for a run, plan for a plan)")
    report.add_argument("--overwrite", action="store_true",
                        help="replace files of the report's names in --out that kvsim did not write there")
    report.set_defaults(handler=report_command)

    storage = sub.add_parser("storage", parents=[common],
                             help="run a storage benchmark (transfer layer only) against a pool")
    storage.add_argument("bench", type=Path, help="storage benchmark YAML file (see docs/storage_bench.md)")
    storage.add_argument("--out", type=Path, default=None, help="also write storage_bench.csv into this folder")
    storage.set_defaults(handler=_storage)

    calibrate = sub.add_parser("calibrate", parents=[common],
                               help="fit a card family's physical parameters to measurements")
    calibrate.add_argument("measurements", type=Path, nargs="+",
                           help="measurement files: CSV (vLLM runs table, per-iteration step table) or benchmark "
                                "results (vllm bench serve --save-result JSON, GuideLLM report JSON/YAML, "
                                "inference-perf stage_N_lifecycle_metrics.json), each with its engine settings in a "
                                "<stem>.kvsim.yaml (or kvsim.yaml) beside it")
    calibrate.add_argument("--out", type=Path, required=True, help="calibration file to write (calib.yaml)")
    calibrate.add_argument("--accelerator", default="h100-sxm", help="catalog accelerator to fit (default h100-sxm)")
    calibrate.add_argument("--params", default=None,
                           help="comma-separated parameters to fit (default: kvsim.calibration.parameters.DEFAULT_FIT)")
    calibrate.add_argument("--no-loo", action="store_true", help="skip the leave-one-out refits")
    calibrate.add_argument("--fit-time-scale", type=float, default=0.1,
                           help="shorten each run's stages by this factor while fitting (reports are full length)")
    calibrate.add_argument("--workers", type=int, default=1, help="processes simulating runs in parallel")
    calibrate.set_defaults(handler=_calibrate)

    catalog = sub.add_parser("catalog", parents=[common], help="list the accelerators, nodes, KV pool nodes and models kvsim knows")
    catalog.add_argument("family", nargs="?", choices=["accelerators", "nodes", "pool_nodes", "models"],
                         help="one family only (default: all)")
    catalog.add_argument("--json", action="store_true", help="full entries as JSON, sources included")
    catalog.set_defaults(handler=catalog_command)

    schema = sub.add_parser("schema", parents=[common], help="write the JSON Schema of scenario files (for editors)")
    schema.add_argument("--out", type=Path, default=None, help="file to write (default: standard output)")
    schema.set_defaults(handler=_schema)
    return parser


_OVERWRITE_HELP = ("write into --out even if it holds another scenario's results (removed first: the files its "
                   "manifest names and its stored points) or, in a folder kvsim did not write, files of the names "
                   "the run writes (replaced; nothing else is removed)")
_DEBUG_HELP = ("on an internal error, print the full traceback too (it is always written to a file); "
               "also KVSIM_DEBUG=1")


def _schema(args: argparse.Namespace) -> int:
    from kvsim.scenario.json_schema import scenario_json_schema_text

    text = scenario_json_schema_text()
    if args.out is None:
        sys.stdout.write(text)
        return 0
    try:
        args.out.write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"kvsim schema: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"schema written: {args.out} (first line of a scenario: "
          f"# yaml-language-server: $schema=<path to {args.out.name}>)")
    return 0


def _add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", dest="overrides",
                        help="change one field of the file, as YAML: --set workload.arrival.rate=20/s "
                             "(repeatable; validated like the file)")


def _add_watchdog(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--watchdog-s", type=_watchdog_seconds, default=None, metavar="SECONDS",
                        help="stop a run that makes no progress (simulated time, requests) for this many wall "
                             "seconds, or whose event count outgrows its size (default 60, or KVSIM_WATCHDOG_S; "
                             "0: no watchdog)")


def _watchdog_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds (a number >= 0), got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds (a number >= 0), got {text!r}")
    return value


def _file_stem(text: str) -> str:
    """An argparse type: a file stem that names a file of the folder itself (``report``, ``study-v2``)."""
    if safe_name(text) != text:
        raise argparse.ArgumentTypeError(f"expected a file stem of letters, digits, '-', '_' and '.' (not starting "
                                         f"or ending with '.'), got {text!r}")
    return text


def _integer(minimum: int, what: str):
    """An argparse type: an integer of at least ``minimum`` (``what`` names it in the message)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {what} integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a {what} integer, got {value}")
        return value
    return parse


_workers = _integer(1, "positive")
_seed = _integer(0, "non-negative")


def _validate(args: argparse.Namespace) -> int:
    from kvsim.scenario.load import load_scenario
    from kvsim.sim import check_scenario
    from kvsim.sim.layout_search import FINALISTS, PILOT_DURATION_S, search_space

    scenario = load_scenario(args.scenario, args.overrides)
    args.root_seed = scenario.spec.seed
    sizings = check_scenario(scenario)
    print_warnings("validate", scenario)
    spec = scenario.spec
    say(f"{args.scenario}: valid scenario {spec.name!r}: {len(spec.systems)} system(s), "
         f"{len(scenario.points)} sweep point(s), {spec.duration:g} s simulated "
         f"({'warm-up found per run by MSER-5, two passes each' if spec.warmup_auto else f'{spec.warmup:g} s warm-up'})")
    first = scenario.points[0].spec
    for name in first.systems:
        s = sizings.get((0, name))
        if s is None:  # layout: best, chosen by pilot runs
            space = search_space(first, name, scenario.catalogs_for(scenario.points[0]))
            sizing = space.start_sizing
            pilot = min(first.duration, PILOT_DURATION_S)
            if len(space.pools) == 1 and len(sizing.pools) == 1:
                (_, tried), = space.pools
                pool = sizing.pools[0]
                say(f"  {name}: {sizing.model.name} {sizing.dtype}, {pool.spec.nodes} x {pool.node.name}, "
                     f"layout: best, chosen when it runs: pilots of {pilot:g} s of {len(tried)} layout(s), "
                     f"then the best {min(FINALISTS, len(tried))} at full length")
                say(f"    layouts tried: {', '.join(layout.label() for layout in tried)}")
                continue
            say(f"  {name}: {sizing.model.name} {sizing.dtype}, layout: best for pool(s) "
                 f"{', '.join(p for p, _ in space.pools)}, chosen when it runs, one pool at a time: pilots of "
                 f"{pilot:g} s of at most {space.pilots} layout(s), then the best "
                 f"{min(FINALISTS, space.pilots)} at full length")
            searched = dict(space.pools)
            for pool in sizing.pools:
                if pool.name in searched:
                    say(f"    pool {pool.name}: {pool.spec.nodes} x {pool.node.name}, starts at "
                         f"{dict(space.start.layouts)[pool.name].label()}; layouts tried: "
                         f"{', '.join(layout.label() for layout in searched[pool.name])}")
                else:
                    say(f"    pool {pool.name}: {pool.describe()}")
            continue
        if len(s.pools) == 1 and not s.disaggregated:
            say(f"  {name}: {s.model.name} {s.dtype}, {s.pools[0].describe()}")
            continue
        say(f"  {name}: {s.model.name} {s.dtype}, prefill/decode disaggregated")
        for pool in s.pools:
            say(f"    pool {pool.name}: {pool.describe()}")
    from kvsim.backend import resolve
    from kvsim.plan.run_cost import run_cost

    backend = resolve(spec.system_engine(next(iter(spec.systems))).backend)  # (refused above if it cannot be)
    print(run_cost(scenario, sizings, backend=backend).describe())
    if spec.plan is not None:
        from kvsim.plan.first_guess import plan_cost

        cost = plan_cost(scenario, backend=backend)
        if cost is not None:
            print(cost.describe())
        from kvsim.plan.sensitivity import sensitivity_cost

        line = sensitivity_cost(scenario)
        if line is not None:
            print(line)
    return 0


def _run(args: argparse.Namespace) -> int:
    # Loading (modules, the scenario, its trace) makes objects that live as long as the process:
    # the cyclic collector is held off while they are made (its passes, full ones included, would
    # find no garbage) and they are frozen out of its reach before the run (docs/speed.md)
    gc.disable()
    try:
        return _run_loaded(args)
    finally:
        gc.enable()


def _run_loaded(args: argparse.Namespace) -> int:
    from kvsim.plan import ExecutorError, run_sweep
    from kvsim.report import comparison_table, write_results
    from kvsim.report.manifest import RUN_OUTPUTS, finish_results
    from kvsim.scenario.load import load_scenario
    from kvsim.sim import check_scenario

    scenario = dataclasses.replace(load_scenario(args.scenario, args.overrides), watchdog_s=args.watchdog_s)
    args.root_seed = scenario.spec.seed if args.seed is None else args.seed
    check_scenario(scenario)  # refuse what cannot run before touching the filesystem
    print_warnings(args.command, scenario)
    out = args.out if args.out is not None else Path("results") / safe_name(scenario.name)
    refused = prepare_out(args.command, out, scenario.name, RUN_OUTPUTS, args.overwrite)  # before a long run
    if refused is not None:
        return refused
    show_progress = not args.no_progress and sys.stderr.isatty()
    gc.freeze()  # what loading made: out of the collector's reach for the run
    gc.enable()
    try:
        result = run_sweep(scenario, out, seed=args.seed, workers=args.workers, dask=args.dask,
                           scheduler=args.scheduler, bar=show_progress)
    except ExecutorError as exc:
        print(f"kvsim {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(comparison_table(result))
    for one in result.runs:  # refused requests are left out of every number: say so beside the table
        note = one.summary.get("rejected_note")
        if note:
            where = " ".join(f"{k.split('.')[-1]}={v}" for k, v in one.params.items())
            say(f"kvsim {args.command}: warning: system {one.system!r}{' at ' + where if where else ''}: {note}",
                 file=sys.stderr)
    try:
        written = write_results(result, out, source_text=args.scenario.read_text(encoding="utf-8"))
    except OSError as exc:
        print(f"kvsim {args.command}: cannot write results to {out}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if scenario.spec.study is not None:
        from kvsim.report.studies import write_study

        markdown, study_files = write_study(result, out)
        print(markdown)
        written += study_files
    print("results written: " + ", ".join(str(p) for p in written))
    if not args.no_report:
        written += _write_run_report(args.command, out)
    try:
        finish_results(out, written, scenario.name, result.seed)  # last: the folder is complete
    except OSError as exc:
        print(f"kvsim {args.command}: cannot write {out / 'manifest.json'}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


def _write_run_report(command: str, out: Path) -> list[Path]:
    """The run's report, read back from the files just written; the results stand without it."""
    try:
        from kvsim.report.run_report import write_run_report

        report = write_run_report(out, out, "report")
        print("report written: " + ", ".join(str(p) for p in report if p.suffix in (".html", ".md")))
        return list(report)
    except Exception as exc:  # noqa: BLE001 - any failure to render must not lose a finished run
        print(f"kvsim {command}: warning: the report was not written ({type(exc).__name__}: "
              f"{' '.join(str(exc).split())})", file=sys.stderr)
        return []


def _storage(args: argparse.Namespace) -> int:
    import pandas as pd

    from kvsim.scenario.storage_bench import load_storage_bench
    from kvsim.sim.storage_bench import run_storage_bench

    bench = load_storage_bench(args.bench)
    if args.out is not None:
        try:  # fail before running, not after
            args.out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            print(f"kvsim storage: cannot write results to {args.out}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    frame = pd.DataFrame(run_storage_bench(bench))
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if args.out is not None:
        frame.to_csv(args.out / "storage_bench.csv", index=False)
        print(f"results written: {args.out / 'storage_bench.csv'}")
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from kvsim.calibration.calibfile import write_calibration
    from kvsim.calibration.calibrate import calibrate
    from kvsim.calibration.parameters import DEFAULT_FIT
    from kvsim.calibration.report import calibration_document

    names = DEFAULT_FIT if args.params is None else tuple(p.strip() for p in args.params.split(",") if p.strip())
    if not 0 < args.fit_time_scale <= 1:
        print(f"kvsim calibrate: --fit-time-scale must be in (0, 1], got {args.fit_time_scale:g}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.out.parent and not args.out.parent.exists():
        print(f"kvsim calibrate: cannot write {args.out}: folder {args.out.parent} does not exist", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        result = calibrate(args.measurements, args.accelerator, names, fit_time_scale=args.fit_time_scale,
                           with_loo=not args.no_loo, workers=max(1, args.workers),
                           progress=lambda m: print(m, file=sys.stderr, flush=True))
    except ValueError as exc:
        print(f"kvsim calibrate: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    document = calibration_document(result)
    try:
        write_calibration(args.out, document)
    except OSError as exc:
        print(f"kvsim calibrate: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for name, p in document["fitted"].items():
        print(f"{name:34s} {p['datasheet']:.4g} -> {p['value']:.4g}  [{p['lower']:g}, {p['upper']:g}]"
              + ("  (at a bound)" if p["at_bound"] else ""))
    for label, table in document["errors"].items():
        if label == "note" or not table:
            continue
        print(f"{label}: " + "; ".join(f"{m} median |err| {100 * e['median_abs']:.1f} %, p90 {100 * e['p90_abs']:.1f} %"
                                      for m, e in table.items()))
    print(f"calibration written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
