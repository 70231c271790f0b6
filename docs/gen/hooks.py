"""MkDocs hook: links from a docs page to a file of the repository outside ``docs/``.

The pages link to scenarios, benchmarks, notebooks and source files by their path in the
repository (``../../scenarios/h20_vs_l20.yaml``), so the links work where the Markdown is read on
its own (a clone, a code host). MkDocs only knows the files under ``docs/``, and ``--strict``
fails on a link it cannot find. This hook copies each such file into the site under ``repo/``
(the same relative path) and points the link there, so it works in the site too; a link to a
path that does not exist in the repository is left alone, and ``mkdocs build --strict`` still
fails on it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

LINK = re.compile(r"(\]\()([^)\s#]+)((?:#[^)\s]*)?\))")
"""An inline Markdown link's target: ``](path#anchor)``."""

REPO_PREFIX = "repo"


def _repo_target(page_src: str, target: str, docs_dir: Path, root: Path) -> str | None:
    """The repository path (posix) a relative link from ``page_src`` reaches outside docs_dir, or None."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
        return None
    resolved = (docs_dir / page_src).parent.joinpath(target).resolve()
    try:
        resolved.relative_to(docs_dir)
        return None  # inside docs/: MkDocs checks it
    except ValueError:
        pass
    try:
        rel = resolved.relative_to(root)
    except ValueError:
        return None
    return rel.as_posix() if resolved.is_file() else None


def on_files(files: Files, config: Any) -> Files:
    docs_dir = Path(config["docs_dir"]).resolve()
    root = docs_dir.parent
    wanted: set[str] = set()
    for file in files.documentation_pages():
        text = Path(file.abs_src_path).read_text(encoding="utf-8")
        for match in LINK.finditer(text):
            rel = _repo_target(file.src_uri, match.group(2), docs_dir, root)
            if rel is not None:
                wanted.add(rel)
    for rel in sorted(wanted):
        files.append(File.generated(config, f"{REPO_PREFIX}/{rel}", abs_src_path=str(root / rel)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    docs_dir = Path(config["docs_dir"]).resolve()
    root = docs_dir.parent

    def rewrite(match: re.Match[str]) -> str:
        rel = _repo_target(page.file.src_uri, match.group(2), docs_dir, root)
        if rel is None:
            return match.group(0)
        here = posixpath.dirname(page.file.src_uri)
        return match.group(1) + posixpath.relpath(f"{REPO_PREFIX}/{rel}", here or ".") + match.group(3)

    return LINK.sub(rewrite, markdown)
