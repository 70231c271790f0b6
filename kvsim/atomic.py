"""Files written whole or not at all: a temporary file in the same folder, renamed into place
(``os.replace`` is atomic on POSIX), so a reader never sees half a file and a killed writer
leaves only a ``.NAME.PID.RANDOM.tmp`` behind."""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path

__all__ = ["write_atomic", "write_text_atomic", "write_bytes_atomic", "sha256_of", "TEMPORARY"]


TEMPORARY = re.compile(r"\..+\.\d+\.[0-9a-f]{12}\.tmp")
"""The name of a temporary file :func:`write_atomic` writes (``.NAME.PID.RANDOM.tmp``)."""


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(temporary path)`` in ``path``'s folder, then rename the file to ``path``.

    The temporary name is unique to this process and call, so two writers never share one."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        write(temporary)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    write_atomic(path, lambda p: p.write_text(text, encoding="utf-8"))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    write_atomic(path, lambda p: p.write_bytes(data))


def sha256_of(path: Path) -> str:
    """SHA-256 of the file ``path``, hex (read in 1 MiB chunks): what a manifest or a marker
    records of each file kvsim wrote, to tell later whether it is still that file."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
