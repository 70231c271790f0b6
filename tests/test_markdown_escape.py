"""Reports escape what came from input (issue 22, item 6).

Scenario, system, catalog (accelerator, node, model) names, descriptions and swept values reach
``report.md``, ``plan.md`` and the study pages as text: no HTML tag, link or extra table column
survives from them, ordinary names read as written, and the HTML pages stay escaped. Names
printed on the terminal show their control characters as escapes, and figures draw names as
written (a ``$...$`` in a name is not matplotlib mathtext, which refused it and ended the run).
"""

from __future__ import annotations

import contextlib
import html
import io
import json
import re
from pathlib import Path

import pytest

from kvsim.cli import main
from kvsim.escape import markdown_text, terminal_text

SCRIPT = "<script>alert(1)</script>"
LINK = "[x](javascript:alert(1))"
MATH = "$\\x{$"  # not a valid mathtext expression
NAMES = {
    "scenario": f"run {SCRIPT} | {LINK} {MATH}",
    "description": "said <img src=x onerror=alert(2)> `code` *bold* _em_",
    "system": f"s{SCRIPT}|{LINK}{MATH}",
    "accelerator": f"acc{SCRIPT}|[a](javascript:alert(3))",
    "node": "node<b>|[n](javascript:alert(4))",
    "model": f"m{SCRIPT}|[m](javascript:alert(5))",
}

RUN = """\
name: {scenario}
description: {description}
seed: 3
duration: 8 s
warmup: 2 s
model: {model}
catalog:
  accelerators:
    {accelerator}: {{base: l20}}
  nodes:
    {node}: {{base: l20-8x, accelerator: {accelerator}}}
  models:
    {model}: {{base: qwen3-1.7b}}
workload:
  arrival: {{kind: poisson, rate: 2/s}}
  input_tokens: {{kind: fixed, value: 128}}
  output_tokens: {{kind: fixed, value: 8}}
systems:
  {system}: {{node: {node}, instances: 1}}
  plain_b: {{node: l20-8x, instances: 1}}
sweep:
  systems.plain_b.node: [l20-8x, {node}]
"""

PLAN = """\
name: {scenario}
seed: 4
duration: 20 s
warmup: 4 s
model: {model}
catalog:
  models:
    {model}: {{base: qwen3-1.7b}}
workload:
  arrival: {{kind: poisson, rate: 1/s}}
  input_tokens: {{kind: fixed, value: 500}}
  output_tokens: {{kind: fixed, value: 16}}
slo: {{ttft_p99: 1 s}}
systems:
  {system}: {{node: h20-8x, instances: 1, instance: {{max_num_seqs: 4}}}}
  l20: {{node: l20-8x, instances: 1, instance: {{max_num_seqs: 4}}}}
plan: {{targets: [2/s], units: {{max: 2}}, rel_tol: 0.5}}
"""

GAP = """\
name: {scenario}
seed: 3
duration: 8 s
warmup: 2 s
model: qwen3-1.7b
workload:
  arrival: {{kind: closed_loop, clients: 2}}
  input_tokens: {{kind: fixed, value: 256}}
  output_tokens: {{kind: fixed, value: 4}}
systems:
  {system}: {{node: h20-8x, instances: 1}}
  lo: {{node: l20-8x, instances: 1}}
study:
  kind: gap
  high: "H{script}"
  low: "L|low"
  configs: {{"{link}": [{system}, lo]}}
"""


def _main(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def _scenario(folder: Path, template: str, **extra: str) -> Path:
    path = folder / "s.yaml"
    quoted = {k: json.dumps(v) for k, v in NAMES.items()}
    path.write_text(template.format(**quoted, **extra), encoding="utf-8")
    return path


def _unescaped(markdown: str, char: str) -> list[int]:
    """Positions of ``char`` not escaped by a backslash."""
    return [m.start() for m in re.finditer(r"(?<!\\)(?:\\\\)*" + re.escape(char), markdown)]


def _check_markdown(markdown: str, names: list[str]) -> None:
    """No tag, no link but the page's own figures, every table row as wide as its header, and
    every name there in its escaped form."""
    assert not re.search(r"<[A-Za-z/!?]", markdown), "an HTML tag (or comment) from input survived"
    for target in re.findall(r"(?<!\\)\]\(([^)]*)\)", markdown):
        assert re.fullmatch(r"[\w.-]+\.png", target), f"a link to {target!r}"
    for block in re.split(r"\n\n+", markdown):
        lines = [line for line in block.splitlines() if line.startswith("|")]
        if lines:
            widths = {len(_unescaped(line, "|")) for line in lines}
            assert len(widths) == 1, f"a table row with an extra column: {lines}"
    for name in names:
        assert markdown_text(name) in markdown, name


def _unescape(markdown: str) -> str:
    """Read escaped Markdown text back: backslash escapes, then entities (CommonMark's rules)."""
    return html.unescape(re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown))


@pytest.mark.parametrize("text", list(NAMES.values()) + [
    "# heading #", "- item", "+ item", "1. item", "2) item", "---", "***", "a\\b\\", "&amp; &lt;", "<!-- x -->",
    "![img](http://x/y.png)", "<https://example.com>", "_a_ __b__ a_ _b", "tab\tand\nnewline", "x | y || z",
])
def test_escaped_text_reads_back_as_written_and_opens_nothing(text):
    escaped = markdown_text(text)
    assert _unescape(escaped) == " ".join(text.split())
    assert "\n" not in escaped and not re.search(r"<[A-Za-z/!?]", escaped)
    assert not _unescaped(escaped, "|") and not _unescaped(escaped, "[") and not _unescaped(escaped, "`")
    assert not _unescaped(escaped, "*") and not re.match(r"(#|[-+] |\d+[.)] |---)", escaped)


@pytest.mark.parametrize("name", ["h20_vs_l20", "offload-gap.v2", "h20-vs-l20-chat", "tp4 pp2", "8x h20, 8 inst tp1",
                                  "1/s", "kv_cache.dram.capacity", "qwen3-8b", "1.5 s", "+25%", "$1,234"])
def test_ordinary_names_are_left_as_they_are(name):
    assert markdown_text(name) == name


def test_the_run_report_escapes_every_name_from_input(tmp_path):
    rc, stdout, err = _main("run", _scenario(tmp_path, RUN), "--out", tmp_path / "out", "--workers", "1",
                            "--no-progress")
    assert rc == 0, err
    assert "warning" not in err  # the report (its figures too) was written
    markdown = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert SCRIPT not in markdown and LINK not in markdown and "<b>" not in markdown
    _check_markdown(markdown, [NAMES[k] for k in ("scenario", "description", "system", "accelerator", "node")])
    assert markdown.startswith("# Run report: " + markdown_text(NAMES["scenario"]) + "\n")
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    # the one script is the report's own (legend toggles); names reach the page, figures' SVG included, as text
    assert "<script" not in _own_script_out(page) and "<img src=x" not in page and "<b>" not in page
    assert html.escape(NAMES["system"]) in page
    # rendered again by kvsim report: the same escaping
    assert _main("report", tmp_path / "out", "--out", tmp_path / "again")[0] == 0
    assert (tmp_path / "again" / "report.md").read_text(encoding="utf-8") == markdown


def _own_script_out(page: str) -> str:
    from kvsim.report.interactive import TOGGLE_SCRIPT

    return page.replace(f"<script>{TOGGLE_SCRIPT}</script>", "")


def test_the_plan_report_escapes_every_name_from_input(tmp_path):
    rc, _, err = _main("plan", _scenario(tmp_path, PLAN), "--out", tmp_path / "out", "--workers", "1")
    assert rc == 0, err
    markdown = (tmp_path / "out" / "plan.md").read_text(encoding="utf-8")
    assert SCRIPT not in markdown and LINK not in markdown
    _check_markdown(markdown, [NAMES["scenario"], NAMES["system"]])
    page = (tmp_path / "out" / "plan.html").read_text(encoding="utf-8")
    assert "<script" not in _own_script_out(page) and html.escape(NAMES["system"]) in page


def test_a_study_page_escapes_every_name_from_input(tmp_path):
    scenario = _scenario(tmp_path, GAP, script=SCRIPT.replace('"', '\\"'), link=LINK)
    rc, stdout, err = _main("run", scenario, "--out", tmp_path / "out", "--workers", "1", "--no-progress",
                            "--no-report")
    assert rc == 0, err
    assert (tmp_path / "out" / "gap.png").is_file()
    markdown = (tmp_path / "out" / "gap.md").read_text(encoding="utf-8")
    assert SCRIPT not in markdown and LINK not in markdown and "L|low" not in markdown
    _check_markdown(markdown, [NAMES["scenario"], LINK, f"H{SCRIPT}", "L|low"])
    assert markdown in stdout  # the page printed is the page written


def test_names_printed_on_the_terminal_show_their_control_characters(tmp_path):
    text = RUN.replace("sweep:\n  systems.plain_b.node: [l20-8x, {node}]\n", "")
    path = tmp_path / "s.yaml"
    quoted = {k: json.dumps(v) for k, v in NAMES.items()}
    quoted["scenario"] = json.dumps("clear\x1b[2J\x1b[31mred\u202e")
    quoted["system"] = json.dumps("s\x1b]0;title\x07\x1b[1A")
    path.write_text(text.format(**quoted), encoding="utf-8")
    rc, stdout, err = _main("run", path, "--out", tmp_path / "out", "--workers", "1", "--no-progress", "--no-report")
    assert rc == 0, err
    table = (tmp_path / "out" / "table.txt").read_text(encoding="utf-8")
    for shown in (stdout, table):
        assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
        assert "clear\\x1b[2J\\x1b[31mred\\u202e" in shown and "s\\x1b]0;title\\x07\\x1b[1A" in shown
    # the columns line up: the first column as wide as its rule, measured on the escaped name
    lines = table.splitlines()
    rule = next(k for k, line in enumerate(lines) if line and set(line) <= {"-", " "})
    width = lines[rule].index(" ")
    assert lines[rule + 1][:width + 2] == "s\\x1b]0;title\\x07\\x1b[1A".ljust(width + 2)
    assert terminal_text("tp4 pp2, 1/s") == "tp4 pp2, 1/s"


def test_validate_and_the_progress_lines_show_control_characters_escaped(tmp_path):
    """What ``kvsim validate`` prints of a system, and the progress line naming a swept text value:
    an ESC or a bidi override from the file is shown as its escape, never sent to the terminal."""
    evil = "s\x1b[2J\u202e"
    text = RUN.format(**{**{k: json.dumps(v) for k, v in NAMES.items()}, "system": json.dumps(evil)})
    text = text.replace("sweep:\n  systems.plain_b.node: [l20-8x, {node}]\n".format(node=json.dumps(NAMES["node"])),
                        "sweep:\n  description: [\"a\\e[31m\", b]\n")
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    rc, stdout, err = _main("validate", path)
    assert rc == 0, err
    assert "\x1b" not in stdout and "\u202e" not in stdout and "s\\x1b[2J\\u202e:" in stdout
    rc, stdout, err = _main("run", path, "--out", tmp_path / "out", "--workers", "1", "--no-progress", "--no-report")
    assert rc == 0, err
    assert "\x1b" not in err and "point 0 [description=a\\x1b[31m] done" in err


def test_log_axes_of_figures_drawn_literally_write_their_ticks_as_numbers():
    """Matplotlib writes log tick labels as mathtext (``$\\mathdefault{10^{0}}$``); in a figure
    whose text is drawn as written they would show as those characters. plain_log_ticks writes
    plain numbers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kvsim.escape import literal_figure_text, plain_log_ticks

    @literal_figure_text
    def draw(plain: bool) -> list[str]:
        fig, ax = plt.subplots()
        ax.plot([1, 2], [1.0, 6.5])
        ax.set_yscale("log")
        if plain:
            plain_log_ticks(ax.yaxis)
        fig.canvas.draw()
        labels = [t.get_text() for t in ax.yaxis.get_ticklabels(which="both") if t.get_text()]
        plt.close(fig)
        return labels

    assert any("$" in label for label in draw(False))  # (what the figures showed before)
    labels = draw(True)
    assert labels and not any("$" in label for label in labels)
    assert {"1", "2", "5"} <= set(labels)


@pytest.mark.parametrize("low, high, expect", [(0.9, 1.6, {"1", "1.2", "1.4"}), (1.0, 6.5, {"1", "2", "5"}),
                                               (0.01, 300.0, {"0.01", "1", "100"})])
def test_plain_log_ticks_label_narrow_and_wide_axes(low, high, expect):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kvsim.escape import literal_figure_text, plain_log_ticks

    @literal_figure_text
    def labels() -> list[str]:
        fig, ax = plt.subplots()
        ax.plot([1, 2], [low, high])
        ax.set_yscale("log")
        ax.set_ylim(low, high)
        plain_log_ticks(ax.yaxis)
        fig.canvas.draw()
        shown = [t.get_text() for t in ax.yaxis.get_ticklabels() if t.get_text()]
        plt.close(fig)
        return shown

    shown = labels()
    assert expect <= set(shown) and len(shown) <= 12 and not any("$" in s for s in shown), shown
