"""Build of kvsim's compiled backend (see kvsim/backend.py); everything else is in pyproject.toml.

Each kernel module listed in kvsim/backend_kernels.py is copied to build/cython/ as
``kvsim._compiled.<path_with_underscores>`` -- its imports of other kernels pointed at their
compiled copies, the SHA-256 of its source (and of its ``.pxd``, the field types of its classes,
if it has one) appended so a stale build is detected -- and compiled
by Cython (pure-Python mode: the same source the reference runs) with ``-ffp-contract=off``, so
the C code does the same IEEE operations as CPython. If compiling fails (no C compiler, say),
the install goes on without the compiled backend and says so in one line: every run then uses
the pure-Python reference.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
GENERATED = ROOT / "build" / "cython"
FLAGS = ["-O2", "-ffp-contract=off"]  # no fused multiply-add: the same roundings as CPython


def kernel_modules() -> tuple[str, ...]:
    """The KERNELS tuple of kvsim/backend_kernels.py, read as a literal (the build imports nothing)."""
    tree = ast.parse((ROOT / "kvsim" / "backend_kernels.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "KERNELS" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise RuntimeError("kvsim/backend_kernels.py defines no KERNELS")


def compiled_name(module: str) -> str:
    return "kvsim._compiled." + module.removeprefix("kvsim.").replace(".", "_")


def generated_source(module: str, kernels: tuple[str, ...]) -> Path:
    """Write the copy of ``module`` that compiles as its compiled name; return its path."""
    source = (ROOT / Path(*module.split("."))).with_suffix(".py")
    raw = source.read_bytes()
    text = raw.decode("utf-8")
    declarations = source.with_suffix(".pxd")
    digest = hashlib.sha256(raw)
    if declarations.exists():
        digest.update(declarations.read_bytes())
    text += f"\n\nKVSIM_SOURCE_SHA256 = {digest.hexdigest()!r}\n"
    target = GENERATED / Path(*compiled_name(module).split(".")).with_suffix(".py")
    target.parent.mkdir(parents=True, exist_ok=True)
    for package in (GENERATED / "kvsim", GENERATED / "kvsim" / "_compiled"):
        (package / "__init__.py").touch()
    _write_if_changed(target, _pointed_at_compiled(text, kernels))
    if declarations.exists():  # the types of its classes' fields (Cython's augmenting .pxd), copied beside it
        _write_if_changed(target.with_suffix(".pxd"),
                          _pointed_at_compiled(declarations.read_text(encoding="utf-8"), kernels))
    return target


def _pointed_at_compiled(text: str, kernels: tuple[str, ...]) -> str:
    """``text`` with its imports (and cimports) of other kernels pointed at their compiled copies."""
    for other in kernels:  # longest names first would matter only for prefixes; kernels are leaf names
        text = re.sub(rf"\b{re.escape(other)}\b(?=\s+c?import\b)", compiled_name(other), text)
    return text


def _write_if_changed(target: Path, text: str) -> None:
    if not target.exists() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")


class OptionalBuildExt(build_ext):
    """Compile the kernels if this machine can; otherwise install the pure-Python reference alone."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as error:  # noqa: BLE001 -- any build failure leaves the reference
            self._skip(error)

    def build_extension(self, ext) -> None:
        try:
            super().build_extension(ext)
        except Exception as error:  # noqa: BLE001
            self._skip(error)

    def _skip(self, error: Exception) -> None:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        print(f"kvsim: the compiled backend was not built ({first}); runs use the pure-Python engine",
              file=sys.stderr)


def extensions() -> list:
    if os.environ.get("KVSIM_NO_COMPILE"):
        print("kvsim: KVSIM_NO_COMPILE is set: the compiled backend is not built", file=sys.stderr)
        return []
    try:
        from Cython.Build import cythonize
        from setuptools import Extension
    except ImportError as error:
        print(f"kvsim: Cython is not available ({error}); runs use the pure-Python engine", file=sys.stderr)
        return []
    kernels = kernel_modules()
    exts = [Extension(compiled_name(m), [str(generated_source(m, kernels).relative_to(ROOT))],
                      extra_compile_args=FLAGS) for m in kernels]
    try:
        return cythonize(exts, language_level=3, quiet=True, include_path=[str(GENERATED)],
                         compiler_directives={"annotation_typing": False, "binding": True,
                                              "embedsignature": True, "cdivision": False})
    except Exception as error:  # noqa: BLE001 -- a Cython error leaves the reference
        print(f"kvsim: Cython could not translate the kernels ({error}); runs use the pure-Python engine",
              file=sys.stderr)
        return []


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
