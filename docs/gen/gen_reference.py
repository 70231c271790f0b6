"""Docs pages generated from the code: the command line (argparse), the catalog (its data files
and their sources), the notebook table and the Python API (docstrings)."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from gen_schema import _anchor
from gen_text import BANNER, ROOT, escape_html, one_line, rst_to_md


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, list[str], str, argparse.ArgumentParser]]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    out: list[tuple[str, list[str], str, argparse.ArgumentParser]] = []
    seen: dict[int, int] = {}
    helps = {choice.dest: choice.help for choice in actions[0]._choices_actions}
    for name, sub in actions[0].choices.items():
        if id(sub) in seen:
            out[seen[id(sub)]][1].append(name)
            continue
        seen[id(sub)] = len(out)
        out.append((name, [], helps.get(name) or "", sub))
    return out


def _option_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| argument | value | default | what it does |", "|---|---|---|---|"]
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.help == argparse.SUPPRESS:
            continue
        names = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.dest}`"
        if action.nargs == 0 or not action.option_strings and not action.choices:
            value = ""
        else:
            metavar = action.metavar or (action.dest.upper() if action.option_strings else action.dest)
            value = f"`{metavar}`" + (" …" if action.nargs in ("+", "*") or isinstance(action, argparse._AppendAction)
                                      else "") + (" (optional)" if action.nargs == "?" else "")
            if action.choices and not action.metavar:
                value = " \\| ".join(f"`{c}`" for c in action.choices)
        default = action.default
        shown = "" if default in (None, False, [], argparse.SUPPRESS) else f"`{default}`"
        rows.append(f"| {names} | {value} | {shown} | {one_line(action.help or '')} |")
    return rows


def cli_page() -> str:
    from kvsim.cli import _parser

    parser = _parser()
    out = [BANNER.format(source="kvsim.cli's argparse parser"), "", "# `kvsim` commands and options", "",
           "Every command and option, generated from the parser `kvsim` itself uses (`kvsim/cli.py`), so "
           "it is what `kvsim COMMAND --help` prints. What the commands write, their exit codes, the watchdog "
           "and `--set`: [Command line](command-line.md).", "",
           "```text", _usage(parser, "kvsim"), "```", ""]
    out += _option_rows(parser) + [""]
    for name, aliases, helptext, sub in _subcommands(parser):
        also = f" (also `kvsim {'`, `kvsim '.join(aliases)}`)" if aliases else ""
        sentence = escape_html(rst_to_md(helptext))
        out += [f"## kvsim {name}", "", f"{sentence[:1].upper()}{sentence[1:]}{also}.", "", "```text",
                _usage(sub, f"kvsim {name}"), "```", ""]
        groups = [g for g in sub._action_groups if g._group_actions and g.title not in ("positional arguments",
                                                                                          "options")]
        main_actions = [a for a in sub._actions if not any(a in g._group_actions for g in groups)]
        holder = argparse.ArgumentParser(add_help=False)
        holder._actions = main_actions  # type: ignore[misc]
        out += _option_rows(holder) + [""]
        for group in groups:
            holder = argparse.ArgumentParser(add_help=False)
            holder._actions = list(group._group_actions)  # type: ignore[misc]
            out += [f"*{group.title[0].upper() + group.title[1:]}:*", ""] + _option_rows(holder) + [""]
    return "\n".join(out).rstrip() + "\n"


def _usage(parser: argparse.ArgumentParser, prog: str) -> str:
    parser.prog = prog
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=78)  # type: ignore[assignment]
    return parser.format_usage().strip().removeprefix("usage: ")


# ---------------------------------------------------------------------------------------------
# catalog, from the shipped data files

CATALOG_FILES = (
    ("Accelerators", "kvsim/hardware/data/accelerators.yaml", "accelerators"),
    ("Servers (nodes)", "kvsim/hardware/data/nodes.yaml", "nodes"),
    ("KV pool nodes", "kvsim/hardware/data/pool_nodes.yaml", "pool_nodes"),
    ("Models", "kvsim/models/data/models.yaml", "models"),
)


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        out: list[tuple[str, Any]] = []
        for key, sub in value.items():
            out += _flatten(sub, f"{prefix}.{key}" if prefix else str(key))
        return out
    return [(prefix, value)]


def _source_for(key: str, sources: dict[str, str]) -> str:
    """The file's source for ``key`` (a dotted field), or for the nearest enclosing field."""
    parts = key.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in sources:
            return sources[".".join(parts[:n])]
    return ""


def _scalar(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(_scalar(v) for v in value)
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _header_comment(text: str) -> str:
    lines = []
    for line in text.split("\n"):
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    return " ".join(lines)


def _basis_table(catalog) -> list[str]:
    """What each card's step-time efficiencies rest on, at a glance (kvsim/hardware/provenance.py)."""
    from kvsim.hardware.provenance import BASIS_FIGURES

    def shown(card, figure: str) -> str:
        basis = card.efficiency_basis.get(figure)
        value = getattr(card.efficiency, figure)
        value = card.efficiency.memory if value is None else value
        if basis is None:
            return f"{value} (not stated)"
        if basis.kind == "sibling":
            how = f"from {basis.card}" + (f" x {basis.scale}" if basis.rule == "scaled" else "")
            how += f" x {basis.scale}, GEMM ratio" if basis.rule == "gemm_scaled" else ""
            text = f"{value} ({how})"
        else:
            text = f"{value} ({basis.kind})"
        if figure == "compute":  # a format with its own MFU (FP8 on Hopper), and what it rests on
            formats = card.efficiency_basis.get("compute_formats")
            text += "".join(f"; {fmt} {mfu} ({formats.kind if formats else 'not stated'})"
                            for fmt, mfu in card.efficiency.compute_formats.items())
        return text

    out = ["Efficiency basis per card: *measured* on the card, carried *from* a measured card of the same "
           "architecture and memory technology (times a measured ratio where shown; `compute` across "
           "architectures by the two cards' GEMM ratio), or an *assumption*; a number format with an MFU "
           "of its own follows `compute` "
           "([the rule](../how-to/add-a-card.md), [whole decode steps](../explanation/whole-step.md)).", "",
           "| card | architecture | memory | " + " | ".join(f"`{f}`" for f in BASIS_FIGURES) + " |",
           "|---|---|---|" + "---|" * len(BASIS_FIGURES)]
    for name in catalog.names():
        card = catalog[name]
        out.append(f"| `{name}` | {card.architecture or '–'} | {card.memory_kind} | "
                   + " | ".join(shown(card, f) for f in BASIS_FIGURES) + " |")
    return out + [""]


def catalog_page() -> str:
    from kvsim.cli_catalog import describe
    from kvsim.hardware import accelerator_catalog, node_catalog, pool_node_catalog
    from kvsim.models import model_catalog
    from kvsim.yaml_io import load_yaml

    loaded = {"accelerators": accelerator_catalog(), "nodes": node_catalog(), "pool_nodes": pool_node_catalog(),
              "models": model_catalog()}
    out = [BANNER.format(source="the catalog's data files"), "", "# Catalog", "",
           "Every part kvsim ships, generated from its data files. Each figure is shown as the file writes it "
           "(units included) with the source the file gives for it; a figure with no source of its own takes "
           "its enclosing field's. Letters in brackets are the file's source keys (its header, quoted under "
           "each family); (H), (M), (L) grade a source's confidence; ASSUMPTION marks a figure no source "
           "gave. `kvsim catalog --json` prints the same figures in SI units. A scenario adds or overrides "
           "parts under `catalog:` ([Add a card](../how-to/add-a-card.md)).", ""]
    for title, path, family in CATALOG_FILES:
        out += [f"- [{title}](#{_anchor(family.replace('_', '-'))}): `{path}`, {len(loaded[family].names())} entries"]
    out.append("")
    for title, path, family in CATALOG_FILES:
        text = (ROOT / path).read_text(encoding="utf-8")
        data = load_yaml(text, path).data
        catalog = loaded[family]
        out += [f"## {title} {{#{_anchor(family.replace('_', '-'))}}}", "", f"From `{path}`.", ""]
        header = _header_comment(text)
        if header:
            out += ["??? note \"The file's header (source keys and conventions)\"", "",
                    "    " + rst_to_md(header).replace("\n", " "), ""]
        out += ["| entry | summary |", "|---|---|"]
        for name in catalog.names():
            out.append(f"| [`{name}`](#{_anchor(family)}-{_anchor(name).replace('.', '-')}) | "
                       f"{one_line(describe(family, catalog[name]))} |")
        out.append("")
        if family == "accelerators":
            out += _basis_table(catalog)
        for name, entry in data.items():
            sources = {str(k): str(v) for k, v in (entry.get("sources") or {}).items()}
            out += [f"### {name} {{#{_anchor(family)}-{_anchor(name).replace('.', '-')}}}", "",
                    "| field | value | source |", "|---|---|---|"]
            previous = None
            for key, value in _flatten({k: v for k, v in entry.items() if k != "sources"}):
                source = _source_for(key, sources)
                shown = "(as above)" if source and source == previous else one_line(source)
                previous = source
                out.append(f"| `{key}` | {one_line(_scalar(value))} | {shown} |")
            out.append("")
    return "\n".join(out).rstrip() + "\n"


# ---------------------------------------------------------------------------------------------
# notebooks


def notebooks_block() -> str:
    rows = ["| notebook | what it shows | executed by |", "|---|---|---|"]
    tests = {p.name: p for p in (ROOT / "tests").glob("test_notebook_*.py")}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        first = next((c for c in cells if c["cell_type"] == "markdown"), None)
        source = "".join(first["source"]) if first else ""
        title = next((ln.lstrip("# ").strip() for ln in source.split("\n") if ln.startswith("#")), path.stem)
        runner = next((t for t, p in sorted(tests.items()) if path.name in p.read_text(encoding="utf-8")), None)
        run_by = f"`tests/{runner}`" if runner else "**no test**"
        rows.append(f"| [`notebooks/{path.name}`](../../notebooks/{path.name}) | {one_line(title)} | {run_by} |")
    count = len(rows) - 2
    untested = sum("**no test**" in row for row in rows)
    runs = ("the test suite runs each one top to bottom" if not untested else
            f"the test suite runs {count - untested} of them top to bottom")
    return "\n".join([BANNER.format(source="notebooks/*.ipynb"), "",
                      f"The repository has {count} notebooks; {runs}.", ""] + rows)


# ---------------------------------------------------------------------------------------------
# the Python API, from kvsim's own docstrings


def _doc_md(obj: Any) -> list[str]:
    """A docstring as Markdown: the text before its first numpydoc section as paragraphs, the
    sections (Parameters, Returns, ...) as preformatted text."""
    import inspect

    doc = inspect.getdoc(obj) or ""
    lines = doc.split("\n")
    cut = next((i for i in range(len(lines) - 1)
                if lines[i].strip() and re.fullmatch(r"-{3,}", lines[i + 1].strip())), len(lines))
    out = [rst_to_md("\n".join(lines[:cut]).strip()), ""]
    rest = "\n".join(lines[cut:]).strip()
    if rest:
        out += ["```text", rest, "```", ""]
    return out


def _signature(name: str, func: Any) -> str:
    """``name(params) -> return`` with annotations as written in the source (no quotes)."""
    import inspect

    def shown(annotation: Any) -> str:
        return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)

    sig = inspect.signature(func)
    params = []
    for param in sig.parameters.values():
        text = ("*" if param.kind is param.VAR_POSITIONAL else "**" if param.kind is param.VAR_KEYWORD else "")
        text += param.name
        if param.annotation is not param.empty:
            text += f": {shown(param.annotation)}"
        if param.default is not param.empty:
            text += f" = {param.default!r}"
        params.append(text)
    out = f"{name}({', '.join(params)})"
    if sig.return_annotation is not sig.empty:
        out += f" -> {shown(sig.return_annotation)}"
    return out


def python_api_page() -> str:
    import inspect

    import kvsim

    out = [BANNER.format(source="the docstrings of kvsim's public names (kvsim.__all__)"), "", "# Python API", "",
           "The names `import kvsim` offers (`kvsim.__all__`), generated from their own signatures and "
           "docstrings. A first walk through them: [Your first notebook](../tutorials/first-notebook.md).", ""]
    for name in kvsim.__all__:
        if name.startswith("_"):
            continue
        obj = getattr(kvsim, name)
        if inspect.isclass(obj):
            out += [f"## `kvsim.{name}`", "", f"*class* `kvsim.{name}`", ""] + _doc_md(obj)
            for member, value in sorted(vars(obj).items()):
                if member.startswith("_"):
                    continue
                if isinstance(value, property):
                    out += [f"### `{name}.{member}`", "", "*property*", ""] + _doc_md(value)
                elif inspect.isfunction(value) or isinstance(value, (classmethod, staticmethod)):
                    func = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
                    out += [f"### `{name}.{member}`", "", "```python", _signature(member, func), "```", ""]
                    out += _doc_md(func)
        elif callable(obj):
            out += [f"## `kvsim.{name}`", "", "```python", _signature(f"kvsim.{name}", obj), "```", ""] + _doc_md(obj)
    return "\n".join(out).rstrip() + "\n"
