"""Regression tests for what the scenario fuzzer (tests/test_fuzz.py) found: each a small scenario
that gave a traceback (exit 3) or was accepted when invalid, now refused in one line (exit 2) or
run to the end."""

from __future__ import annotations

import pytest

from kvsim.cli import main

BASE = """\
name: found
seed: 2
duration: 4 s
warmup: 0 s
model: qwen3-1.7b
workload:
  arrival: {kind: closed_loop, clients: 2}
  input_tokens: {kind: fixed, value: 64}
  output_tokens: {kind: fixed, value: 4}
systems:
  a: {node: h20-8x, instance: {tp: 1}}
  b: {node: l20-8x, instance: {tp: 1}}
"""


def _write(tmp_path, text):
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _line(text, needle):
    (n,) = [i for i, row in enumerate(text.splitlines(), 1) if needle in row]
    return n


@pytest.mark.parametrize("base", ["[h20-8x, h20-8x]", "{}"])
def test_a_catalog_base_that_is_not_a_name_is_refused(tmp_path, capsys, base):
    # a list or mapping as base: was TypeError: unhashable type (exit 3)
    text = BASE + f"catalog:\n  nodes:\n    mine: {{base: {base}}}\n"
    path = _write(tmp_path, text)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{_line(text, 'mine:')}: catalog.nodes.mine.base: expected the name of a catalog entry" in err


@pytest.mark.parametrize("with_catalog", [False, True])
def test_an_invalid_swept_catalog_value_is_refused_naming_the_sweep(tmp_path, capsys, with_catalog):
    # was accepted (exit 0): the point silently ran on the unswept catalog; without a catalog:
    # section the error mapping itself failed (KeyError: 'catalog', exit 3)
    text = BASE + ("catalog:\n  nodes:\n    mine: {base: h20-8x}\n" if with_catalog else "") + \
        "sweep:\n  catalog.nodes.h20-8x.nics.count: [1, -3]\n"
    path = _write(tmp_path, text)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert (f"{path}:{_line(text, 'nics.count')}: sweep.catalog.nodes.h20-8x.nics.count: at sweep point "
            f"[catalog.nodes.h20-8x.nics.count=-3]: catalog.nodes.h20-8x.nics.count: Input should be greater") in err
    assert "Traceback" not in err


def _run(tmp_path, capsys, text):
    path = _write(tmp_path, text)
    rc = main(["run", str(path), "--out", str(tmp_path / "out"), "--workers", "1", "--no-report"])
    err = capsys.readouterr().err
    assert rc == 0, err
    return tmp_path / "out"


def test_an_options_study_without_an_slo_runs(tmp_path, capsys):
    # was TypeError formatting slo.ttft_p99 = None in options.md (exit 3 after the whole run)
    out = _run(tmp_path, capsys, BASE + "study: {kind: options}\n")
    assert "none given" in (out / "options.md").read_text()


def test_a_gap_study_over_text_values_draws_a_plain_axis(tmp_path, capsys):
    # x swept over "100 Gbit/s", ...: a log axis refused them (ValueError, exit 3 after the run)
    text = BASE + ("catalog:\n  nodes:\n    slow: {base: h20-8x}\n"
                   "study: {kind: gap, configs: {one: [a, b]}, x: catalog.nodes.slow.nics.bandwidth}\n"
                   "sweep:\n  catalog.nodes.slow.nics.bandwidth: [100 Gbit/s, 400 Gbit/s]\n")
    out = _run(tmp_path, capsys, text)
    assert (out / "gap.png").is_file()


def test_a_pd_timeline_without_controller_decisions_is_drawn_empty(tmp_path, capsys):
    # a run shorter than the controller's interval decides nothing: the timeline figure read a
    # column of an empty frame (AttributeError, exit 3 after the run)
    text = BASE.replace("  b: {node: l20-8x, instance: {tp: 1}}\n", (
        "  b:\n    pools: {dt: {node: h20-8x, nodes: 1, instance: {tp: 2}, roles: {prefill: 2, decode: 2}}}\n"
        "    controller: {kind: threshold, signal: prefill_queue, interval: 30 s, low: 10, high: 1000}\n"))
    out = _run(tmp_path, capsys, text + "study: {kind: pd, timeline: [b]}\n")
    assert (out / "pd_timeline.png").is_file()


def test_an_options_study_where_no_request_finished_draws_its_figure(tmp_path, capsys):
    # a run too short for any request to finish: every TTFT speed-up is NaN, and the log axis of
    # options.png refused them (ValueError, exit 3 after the run)
    text = BASE.replace("duration: 4 s", "duration: 0.01 s").replace("value: 64", "value: 30000")
    out = _run(tmp_path, capsys, text + "study: {kind: options, x: seed}\nsweep:\n  seed: [1, 2]\n")
    assert (out / "options.png").is_file()


def test_a_sweep_over_an_slo_field_writes_its_results(tmp_path, capsys):
    # the swept column "slo.ttft_p99" ends like a latency statistic and was cast to float:
    # "2 s" could not be (ValueError, exit 3 after the run)
    out = _run(tmp_path, capsys, BASE + "sweep:\n  slo.ttft_p99: [2 s, 3 s]\n")
    assert (out / "summary.json").is_file()


def test_a_refused_swept_catalog_value_is_reported_at_its_own_sweep_key(tmp_path, capsys):
    # with two catalog sweep keys the problem was reported at the first one, not the one that set it
    text = BASE + ("sweep:\n  catalog.nodes.h20-8x.nics.count: [1, 2]\n"
                   "  catalog.nodes.l20-8x.nics.count: [1, -3]\n")
    path = _write(tmp_path, text)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{_line(text, 'l20-8x.nics.count')}: sweep.catalog.nodes.l20-8x.nics.count: at sweep point" in err
    assert "sweep.catalog.nodes.h20-8x" not in err
