"""A report as a list of blocks -- headings, paragraphs, tables, figures -- rendered to Markdown
and to one self-contained HTML page (figures inlined as SVG with hover values and legend toggles,
:mod:`kvsim.report.interactive`, or embedded as PNG data; no external URL), so the two always say
the same thing."""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kvsim.atomic import write_bytes_atomic
from kvsim.escape import markdown_text
from kvsim.report.interactive import TOGGLE_SCRIPT

__all__ = ["Document", "Figure", "Strong", "to_markdown", "to_html", "document_files", "write_files"]


class Strong(str):
    """Plain text shown strong (bold) in a table cell: the one cell a reader should find first."""


@dataclass(frozen=True)
class Figure:
    """A PNG figure: ``name`` is its file name next to the Markdown, ``png`` its bytes; ``svg``, when
    given, the same figure as an SVG element the HTML page inlines instead (with its hover titles
    and legend toggles, :func:`kvsim.report.interactive.render`)."""

    name: str
    png: bytes
    caption: str
    svg: str = ""


@dataclass
class Document:
    """Blocks in reading order: ``("h1"|"h2"|"h3", text)``, ``("p", text)``, ``("list", [items])``,
    ``("table", (header, rows, note))``, ``("figure", Figure)``. Every text is plain text, never
    markup: each renderer escapes it for its own format."""

    title: str
    blocks: list[tuple[str, Any]] = field(default_factory=list)

    def heading(self, text: str, level: int = 2) -> None:
        self.blocks.append((f"h{level}", text))

    def paragraph(self, text: str) -> None:
        self.blocks.append(("p", text))

    def items(self, items: list[str]) -> None:
        self.blocks.append(("list", list(items)))

    def table(self, header: list[str], rows: list[list[str]], note: str = "") -> None:
        self.blocks.append(("table", (list(header), [list(r) for r in rows], note)))

    def figure(self, figure: Figure) -> None:
        self.blocks.append(("figure", figure))

    def figures(self) -> list[Figure]:
        return [value for kind, value in self.blocks if kind == "figure"]


def to_markdown(doc: Document) -> str:
    """Markdown, with figures referenced by file name (write them beside it). Every text of the
    document is plain text, as in :func:`to_html`: it is escaped (:func:`markdown_text`), so a name
    from the scenario shows as written, never as HTML, a link or a table column."""
    md = markdown_text
    out = [f"# {md(doc.title)}", ""]
    for kind, value in doc.blocks:
        if kind in ("h1", "h2", "h3"):
            out += ["#" * int(kind[1]) + " " + md(value), ""]
        elif kind == "p":
            out += [md(value), ""]
        elif kind == "list":
            out += [f"- {md(item)}" for item in value] + [""]
        elif kind == "table":
            header, rows, note = value
            out.append("| " + " | ".join(md(h, cell=True) for h in header) + " |")
            out.append("|" + "|".join("---" for _ in header) + "|")
            out += ["| " + " | ".join(f"**{md(c, cell=True)}**" if isinstance(c, Strong) else md(c, cell=True)
                                      for c in row) + " |" for row in rows]
            out.append("")
            if note:
                out += [md(note), ""]
        elif kind == "figure":
            caption = md(value.caption)
            out += [f"![{caption}]({quote(value.name)})", "", f"*{caption}*", ""]
    return "\n".join(out).rstrip() + "\n"


_STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; max-width: 60rem; margin: 2rem auto;
       padding: 0 1rem; color: #222; line-height: 1.45; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
figure { margin: 1rem 0; } figure img, figure svg { max-width: 100%; height: auto; }
.kvsim-toggle { cursor: pointer; } .hint { font-size: 0.8rem; color: #777; } figcaption { font-size: 0.9rem; color: #555; }
.note { font-size: 0.85rem; color: #555; } .scroll { overflow-x: auto; } td { white-space: nowrap; } td.text { text-align: left; white-space: normal; }
"""


_HINT = "Hover a point or line for its values; click a legend entry to hide or show it."

_NUMBER_CELL = re.compile(r"^([-+$]?\d[\d.,]*(e[-+]?\d+)?(x|%|/s|/h| [A-Za-z/%]{1,8})?[*]?|-)$")


def _td(cell: Any) -> str:
    # numbers (with a unit or a mark) line up on the right, words read from the left
    text = str(cell)
    shown = f"<strong>{html.escape(text)}</strong>" if isinstance(cell, Strong) else html.escape(text)
    return f"<td>{shown}</td>" if _NUMBER_CELL.match(text) else f'<td class="text">{shown}</td>'


def to_html(doc: Document) -> str:
    """One self-contained HTML page: styles and script inline, figures as inline SVG (hover a
    point for its values, click a legend entry to hide or show its series) or ``data:`` URIs."""
    esc = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{esc(doc.title)}</title><style>{_STYLE}</style></head><body>", f"<h1>{esc(doc.title)}</h1>"]
    for kind, value in doc.blocks:
        if kind in ("h1", "h2", "h3"):
            out.append(f"<{kind}>{esc(value)}</{kind}>")
        elif kind == "p":
            out.append(f"<p>{esc(value)}</p>")
        elif kind == "list":
            out.append("<ul>" + "".join(f"<li>{esc(item)}</li>" for item in value) + "</ul>")
        elif kind == "table":
            header, rows, note = value
            head = "".join(f"<th>{esc(str(h))}</th>" for h in header)
            body = "".join("<tr>" + "".join(_td(c) for c in row) + "</tr>" for row in rows)
            out.append(f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>')
            if note:
                out.append(f'<p class="note">{esc(note)}</p>')
        elif kind == "figure" and value.svg:
            out.append(f"<figure>{value.svg}"
                       f"<figcaption>{esc(value.caption)}</figcaption>"
                       f'<p class="hint">{_HINT}</p></figure>')
        elif kind == "figure":
            data = base64.b64encode(value.png).decode("ascii")
            out.append(f'<figure><img alt="{esc(value.caption)}" src="data:image/png;base64,{data}">'
                       f"<figcaption>{esc(value.caption)}</figcaption></figure>")
    if any(figure.svg for figure in doc.figures()):
        out.append(f"<script>{TOGGLE_SCRIPT}</script>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def document_files(doc: Document, stem: str) -> list[tuple[str, bytes]]:
    """The files of ``doc`` as (name, bytes): its figures, ``<stem>.md`` and ``<stem>.html``."""
    return ([(figure.name, figure.png) for figure in doc.figures()]
            + [(f"{stem}.md", to_markdown(doc).encode()), (f"{stem}.html", to_html(doc).encode())])


def write_files(out_dir: str | Path, files: list[tuple[str, bytes]]) -> list[Path]:
    """Write ``files`` (name, bytes) into ``out_dir`` (created if needed), each to a temporary name
    first and then renamed (:mod:`kvsim.atomic`), so a killed run leaves no half-written file.
    Returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in files:
        (out / name).parent.mkdir(parents=True, exist_ok=True)  # (a plan's deployment files: in folders)
        write_bytes_atomic(out / name, data)
        written.append(out / name)
    return written
