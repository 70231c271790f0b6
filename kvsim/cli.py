"""Command line: ``kvsim validate | run (sweep) | plan | storage | calibrate | catalog | schema``.

Exit status: 0 success; 2 bad input (scenario files, CLI arguments, folders that cannot be
written), one clear message and never a traceback; 3 an internal error (a bug) or a run the
watchdog stopped, a short report with the command that reproduces it (:mod:`kvsim.crash`).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Sequence

import kvsim
from kvsim.crash import EXIT_INTERNAL, readers_may_leave, report_uncaught
from kvsim.units import format_quantity
from kvsim.yaml_io import SpecError

EXIT_BAD_INPUT = 2
__all__ = ["main", "EXIT_BAD_INPUT", "EXIT_INTERNAL"]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args = parser.parse_args(argv)
    refused = _backend_refused(args.command)
    if refused is not None:
        return refused
    # the reader of our output going away (`kvsim run ... | head`) is not an error of ours: the
    # command goes on and a run still writes its results; any BrokenPipeError that reaches here
    # came from elsewhere (a dead worker's pipe) and is a failure like any other
    with readers_may_leave():
        try:
            return args.handler(args)
        except SpecError as exc:  # a problem may quote a field path or name from the file: shown escaped
            _say(f"kvsim {args.command}: invalid input", file=sys.stderr)
            for problem in exc.problems:
                _say(f"  {_cut(problem)}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except KeyboardInterrupt:
            print("kvsim: interrupted", file=sys.stderr)
            return 130
        except Exception as exc:  # noqa: BLE001 - a bug, a stuck run or a full disk: reported, never dumped
            return report_uncaught(exc, args, argv)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvsim", description="Discrete-event simulator of LLM inference serving.")
    parser.add_argument("--version", action="version", version=f"kvsim {kvsim.__version__}")
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
    plan.add_argument("scenario", type=Path, help="scenario YAML file with a plan: section")
    plan.add_argument("--out", type=Path, default=None, help="results folder (default: results/<scenario name>)")
    plan.add_argument("--workers", type=_workers, default=None, help="worker processes (default: all cores)")
    plan.add_argument("--overwrite", action="store_true", help=_OVERWRITE_HELP)
    _add_watchdog(plan)
    plan.set_defaults(handler=_plan)

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
    report.set_defaults(handler=_report)

    storage = sub.add_parser("storage", parents=[common],
                             help="run a storage benchmark (transfer layer only) against a pool")
    storage.add_argument("bench", type=Path, help="storage benchmark YAML file (see docs/storage_bench.md)")
    storage.add_argument("--out", type=Path, default=None, help="also write storage_bench.csv into this folder")
    storage.set_defaults(handler=_storage)

    calibrate = sub.add_parser("calibrate", parents=[common],
                               help="fit a card family's physical parameters to measurements")
    calibrate.add_argument("measurements", type=Path, nargs="+",
                           help="measurement CSV files (vLLM runs table and/or per-iteration step table)")
    calibrate.add_argument("--out", type=Path, required=True, help="calibration file to write (calib.yaml)")
    calibrate.add_argument("--accelerator", default="h100-sxm", help="catalog accelerator to fit (default h100-sxm)")
    calibrate.add_argument("--params", default=None,
                           help="comma-separated parameters to fit (default: kvsim.calibration.parameters.DEFAULT_FIT)")
    calibrate.add_argument("--no-loo", action="store_true", help="skip the leave-one-out refits")
    calibrate.add_argument("--fit-time-scale", type=float, default=0.1,
                           help="shorten each run's stages by this factor while fitting (reports are full length)")
    calibrate.add_argument("--workers", type=int, default=1, help="processes simulating runs in parallel")
    calibrate.set_defaults(handler=_calibrate)

    catalog = sub.add_parser("catalog", parents=[common], help="list the accelerators, nodes and models kvsim knows")
    catalog.add_argument("family", nargs="?", choices=["accelerators", "nodes", "models"],
                         help="one family only (default: all)")
    catalog.add_argument("--json", action="store_true", help="full entries as JSON, sources included")
    catalog.set_defaults(handler=_catalog)

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
    if _safe_name(text) != text:
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


def _plan(args: argparse.Namespace) -> int:
    from kvsim.plan.command import run_plan
    from kvsim.report.manifest import PLAN_FILES, PLAN_OUTPUTS, finish_results
    from kvsim.report.plan_report import summary_paragraph
    from kvsim.scenario.load import load_scenario
    from kvsim.sim import check_scenario

    scenario = dataclasses.replace(load_scenario(args.scenario), watchdog_s=args.watchdog_s)
    args.root_seed = scenario.spec.seed
    if scenario.spec.plan is None:
        print(f"kvsim plan: {args.scenario}: the scenario has no plan: section (targets, candidates, units); "
              f"see docs/planning.md", file=sys.stderr)
        return EXIT_BAD_INPUT
    check_scenario(scenario)  # refuse what cannot run before touching the filesystem
    _print_warnings("plan", scenario)
    out = args.out if args.out is not None else Path("results") / _safe_name(scenario.name)
    refused = _prepare_out("plan", out, scenario.name, PLAN_OUTPUTS, args.overwrite)  # before a long search
    if refused is not None:
        return refused
    from kvsim.plan import ExecutorError

    try:
        answer = run_plan(scenario, out, workers=args.workers)
    except ExecutorError as exc:
        print(f"kvsim plan: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # the plan's own files only: a plan_*.png of the user's is not kvsim's to list (and remove later)
    written = [out / name for name in PLAN_FILES if (out / name).is_file()]
    finish_results(out, written, scenario.name, scenario.spec.seed)
    _say(summary_paragraph(answer))
    print(f"report written: {out / 'plan.html'} and {out / 'plan.md'} (answer: {out / 'plan.json'})")
    return 0


def _report(args: argparse.Namespace) -> int:
    from kvsim.report.plan_report import plan_report_files

    answer_path = args.results / "plan.json"
    if not answer_path.is_file():
        return _run_report(args)
    from kvsim.input_files import InputFileError, read_json

    try:
        answer = read_json(answer_path, "plan answer")
    except InputFileError as exc:
        print(f"kvsim report: cannot read {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not isinstance(answer, dict) or answer.get("kind") != "plan":
        print(f"kvsim report: {answer_path} is not the answer of a plan (no \"kind\": \"plan\")", file=sys.stderr)
        return EXIT_BAD_INPUT
    from kvsim.plan.answer import PLAN_FORMAT

    if answer.get("format", 1) != PLAN_FORMAT:
        print(f"kvsim report: {answer_path} has plan format {answer.get('format', 1)}, this kvsim writes and reads "
              f"format {PLAN_FORMAT}: run kvsim plan again with this version", file=sys.stderr)
        return EXIT_BAD_INPUT
    return _write_report(args, plan_report_files(answer, args.name or "plan"))


def _run_report(args: argparse.Namespace) -> int:
    """``kvsim report`` on a run's results folder (summary.json, no plan.json)."""
    from kvsim.report.run_data import ReportInputError
    from kvsim.report.run_report import run_report_files

    try:
        files = run_report_files(args.results, args.name or "report")
    except ReportInputError as exc:
        print(f"kvsim report: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return _write_report(args, files)


def _write_report(args: argparse.Namespace, files: list[tuple[str, bytes]]) -> int:
    """Write a report's ``files`` into ``--out`` (default: the results folder), refusing to replace
    files kvsim did not write there unless ``--overwrite``
    (:func:`kvsim.report.manifest.report_refusal`); the results folder's manifest then lists them."""
    from kvsim.report.document import write_files
    from kvsim.report.manifest import record_files, report_refusal

    out = args.out if args.out is not None else args.results
    try:
        if out.exists() and not out.is_dir():
            print(f"kvsim report: cannot write into {out}: it exists and is not a folder", file=sys.stderr)
            return EXIT_BAD_INPUT
        refusal = report_refusal(out, args.results, [name for name, _ in files], args.overwrite)
        if refusal is not None:
            print(f"kvsim report: {refusal}", file=sys.stderr)
            return EXIT_BAD_INPUT
        written = write_files(out, files)
        if out.resolve() == args.results.resolve():
            record_files(out, written)  # the folder's manifest still verifies
    except OSError as exc:
        print(f"kvsim report: cannot write into {out}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print("report written: " + ", ".join(str(p) for p in written))
    return 0


def _validate(args: argparse.Namespace) -> int:
    from kvsim.scenario.load import load_scenario
    from kvsim.sim import check_scenario
    from kvsim.sim.layout_search import FINALISTS, PILOT_DURATION_S, candidates

    scenario = load_scenario(args.scenario, args.overrides)
    args.root_seed = scenario.spec.seed
    sizings = check_scenario(scenario)
    _print_warnings("validate", scenario)
    spec = scenario.spec
    _say(f"{args.scenario}: valid scenario {spec.name!r}: {len(spec.systems)} system(s), "
         f"{len(scenario.points)} sweep point(s), {spec.duration:g} s simulated "
         f"({'warm-up found per run by MSER-5, two passes each' if spec.warmup_auto else f'{spec.warmup:g} s warm-up'})")
    first = scenario.points[0].spec
    for name in first.systems:
        s = sizings.get((0, name))
        if s is None:  # layout: best, chosen by pilot runs
            tried = candidates(first, name, scenario.catalogs_for(scenario.points[0]))
            sizing = tried[0][1]
            pool = sizing.pools[0]
            pilot = min(first.duration, PILOT_DURATION_S)
            _say(f"  {name}: {sizing.model.name} {sizing.dtype}, {pool.spec.nodes} x {pool.node.name}, "
                 f"layout: best, chosen when it runs: pilots of {pilot:g} s of {len(tried)} layout(s), "
                 f"then the best {min(FINALISTS, len(tried))} at full length")
            _say(f"    layouts tried: {', '.join(layout.label() for layout, _ in tried)}")
            continue
        if len(s.pools) == 1 and not s.disaggregated:
            _say(f"  {name}: {s.model.name} {s.dtype}, {s.pools[0].describe()}")
            continue
        _say(f"  {name}: {s.model.name} {s.dtype}, prefill/decode disaggregated")
        for pool in s.pools:
            _say(f"    pool {pool.name}: {pool.describe()}")
    from kvsim.plan.run_cost import run_cost

    from kvsim.backend import resolve

    backend = resolve(spec.system_engine(next(iter(spec.systems))).backend)  # (refused above if it cannot be)
    print(run_cost(scenario, sizings, backend=backend).describe())
    return 0


MAX_PROBLEM_CHARS = 600
"""Longest problem line shown (a field path or value from input may be thousands of characters;
the start of it says what and where)."""


def _cut(problem: str) -> str:
    return problem if len(problem) <= MAX_PROBLEM_CHARS else (
        f"{problem[:MAX_PROBLEM_CHARS - 40]} ... ({len(problem):,} characters in all)")


def _say(text: str, file=None) -> None:
    """Print text that holds text from input, its control characters but line ends (an ANSI
    escape in a name could rewrite the terminal) shown escaped."""
    from kvsim.escape import terminal_text

    print("\n".join(terminal_text(line) for line in text.split("\n")), file=file)


def _print_warnings(command: str, scenario) -> None:
    for warning in scenario.warnings:
        _say(f"kvsim {command}: warning: {warning}", file=sys.stderr)
    from kvsim.backend import ENV, compiled_problem

    if not os.environ.get(ENV) and any(scenario.spec.system_engine(name).backend == "auto"
                                       for name in scenario.spec.systems):
        problem = compiled_problem()
        if problem is not None:
            _say(f"kvsim {command}: note: the compiled backend cannot run here ({problem}): the pure-Python "
                 f"engine runs instead (the same results, slower; docs/speed.md)", file=sys.stderr)


def _backend_refused(command: str) -> int | None:
    """Exit status for a ``KVSIM_BACKEND`` that cannot be honoured (None if it can, or is unset)."""
    from kvsim.backend import ENV, BackendError, resolve

    if not os.environ.get(ENV, "").strip():
        return None
    try:
        resolve("auto")
    except (ValueError, BackendError) as exc:
        _say(f"kvsim {command}: {ENV}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return None


def _prepare_out(command: str, out: Path, scenario: str, outputs: Sequence[str], overwrite: bool) -> int | None:
    """Create the results folder ``out`` and check it may take the results of ``scenario``
    (:func:`kvsim.report.manifest.folder_refusal`); with ``overwrite``, first remove what another
    kvsim run wrote there. None when the run may go on, else its exit status (the message printed)."""
    from kvsim.report.manifest import clear_results, folder_refusal

    if out.exists() and not out.is_dir():
        print(f"kvsim {command}: cannot write results to {out}: it exists and is not a folder", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        out.mkdir(parents=True, exist_ok=True)
        refusal = folder_refusal(out, scenario, outputs, overwrite)
        if refusal is not None:
            print(f"kvsim {command}: {refusal}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if overwrite:
            clear_results(out)
    except OSError as exc:
        print(f"kvsim {command}: cannot write results to {out}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return None


def _run(args: argparse.Namespace) -> int:
    from kvsim.plan import ExecutorError, run_sweep
    from kvsim.report import comparison_table, write_results
    from kvsim.report.manifest import RUN_OUTPUTS, finish_results
    from kvsim.scenario.load import load_scenario
    from kvsim.sim import check_scenario

    scenario = dataclasses.replace(load_scenario(args.scenario, args.overrides), watchdog_s=args.watchdog_s)
    args.root_seed = scenario.spec.seed if args.seed is None else args.seed
    check_scenario(scenario)  # refuse what cannot run before touching the filesystem
    _print_warnings(args.command, scenario)
    out = args.out if args.out is not None else Path("results") / _safe_name(scenario.name)
    refused = _prepare_out(args.command, out, scenario.name, RUN_OUTPUTS, args.overwrite)  # before a long run
    if refused is not None:
        return refused
    show_progress = not args.no_progress and sys.stderr.isatty()
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
            _say(f"kvsim {args.command}: warning: system {one.system!r}{' at ' + where if where else ''}: {note}",
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


_NAME_BYTES = 100  # well under the 255-byte file names of common file systems, with room for a suffix


def _safe_name(name: str) -> str:
    """``name`` as one safe folder name under ``results/``: letters, digits, ``-``, ``_`` and ``.``
    kept (``h20_vs_l20``, ``offload-gap.v2`` stay as they are), every other character (``/``,
    ``\\``, NUL, spaces, control characters) an underscore; a leading or trailing dot too, so
    the name is never ``.``, ``..`` or hidden; never empty; a name longer than 100 bytes (UTF-8)
    cut and ended with a hash of the whole name, so long names that differ stay apart."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    safe = re.sub(r"^\.+|\.+$", lambda dots: "_" * len(dots.group()), safe)
    if len(safe.encode("utf-8")) > _NAME_BYTES:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        cut = safe.encode("utf-8")[:_NAME_BYTES - len(digest) - 1].decode("utf-8", "ignore")
        safe = f"{cut}-{digest}"
    return safe or "scenario"


def _catalog(args: argparse.Namespace) -> int:
    from kvsim.hardware import accelerator_catalog, node_catalog
    from kvsim.models import model_catalog

    families = {"accelerators": accelerator_catalog(), "nodes": node_catalog(), "models": model_catalog()}
    chosen = [args.family] if args.family else list(families)
    if args.json:
        payload = {f: {n: families[f][n].model_dump(mode="json") for n in families[f].names()} for f in chosen}
        print(json.dumps(payload, indent=2))
        return 0
    for family in chosen:
        print(f"{family}:")
        catalog = families[family]
        for name in catalog.names():
            print(f"  {name:18s} {_describe(family, catalog[name])}")
        print()
    print("(units: decimal GB/TB = 1e9/1e12 bytes, GiB = 2^30; sources: kvsim catalog --json)")
    return 0


def _describe(family: str, spec) -> str:
    if family == "accelerators":
        peaks = ", ".join(f"{d} {format_quantity(v, 'flops')}" for d, v in spec.flops.items())
        link = (f"scale-up {format_quantity(spec.scale_up_bandwidth, 'bandwidth')}/direction"
                if spec.scale_up_bandwidth else f"no scale-up link ({spec.host_link})")
        return (f"{spec.vendor} {format_quantity(spec.memory_bytes, 'bytes')} {spec.memory_kind} "
                f"@ {format_quantity(spec.memory_bandwidth, 'bandwidth')}; {peaks}; {link}")
    if family == "nodes":
        return (f"{spec.accelerators_per_node} x {spec.accelerator}; DRAM "
                f"{format_quantity(spec.host_dram_bytes, 'bytes')}; {spec.nvme.count} NVMe; "
                f"{spec.nics.count} x {spec.nics.bandwidth * 8 / 1e9:g} Gbit/s NIC")
    kind = ("MLA" if spec.mla else "GQA") + (" MoE" if spec.moe else "")
    return (f"{spec.hf_id}: {spec.total_params / 1e9:.1f} B params ({spec.active_params / 1e9:.1f} B active), "
            f"{kind}, KV {spec.kv_bytes_per_token('bf16') / 1024:.0f} KiB/token (bf16)")


if __name__ == "__main__":
    sys.exit(main())
