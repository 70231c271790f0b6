"""``kvsim report``: render a plan's or a run's results folder again as Markdown and HTML with figures
(into the folder, or ``--out`` elsewhere, with a plan's deployment files beside it)."""

from __future__ import annotations

import argparse
import sys

from kvsim.cli_output import EXIT_BAD_INPUT

__all__ = ["report_command"]


def report_command(args: argparse.Namespace) -> int:
    """``kvsim report RESULTS``: the report of a plan (plan.json) or of a run (summary.json)."""
    from kvsim.report.plan_report import plan_deploy_files, plan_report_files

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
    from kvsim.plan.answer import PLAN_FORMAT, READABLE_FORMATS

    if answer.get("format", 1) not in READABLE_FORMATS:
        print(f"kvsim report: {answer_path} has plan format {answer.get('format', 1)}, this kvsim writes and reads "
              f"format {PLAN_FORMAT}: run kvsim plan again with this version", file=sys.stderr)
        return EXIT_BAD_INPUT
    deploy_files = None
    if args.out is not None and args.out.resolve() != args.results.resolve():
        deploy_files = plan_deploy_files(args.results, answer)
        if isinstance(deploy_files, str):
            print(f"kvsim report: {deploy_files}", file=sys.stderr)
            deploy_files = None
    return _write_report(args, plan_report_files(answer, args.name or "plan", deploy_files))



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
