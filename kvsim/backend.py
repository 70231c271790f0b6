"""Engine backends: the pure-Python reference and the same sources compiled to C.

The per-event path's kernel modules (:data:`KERNELS`) are written once, in Cython's
pure-Python mode: plain Python that runs as it is, with ``cython`` type declarations that only
the compiler reads. At install time ``setup.py`` compiles a copy of each into
``kvsim._compiled`` (``kvsim/models/step_time.py`` becomes ``kvsim._compiled.models_step_time``,
its imports of other kernels pointed at their compiled copies), without floating-point
contraction (``-ffp-contract=off``), so both backends run the same IEEE operations in the same
order and give the same records to the bit. Where no C compiler is found the install goes on
without them and every run uses the reference.

A run chooses with ``engine.backend`` (``auto``, the default: compiled if built, else python;
``python``; ``compiled``, an error where it was not built). The environment variable
``KVSIM_BACKEND`` overrides ``auto`` for every run of a process (``python`` to run the
reference everywhere, e.g. in CI's second pass). Which backend ran is in every run's summary.

Both backends live side by side in one process: a run builds its live objects from the kernel
modules of its backend (:func:`kernels`), so tests can run the same scenario both ways.
"""

from __future__ import annotations

import hashlib
import os
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

from kvsim.backend_kernels import KERNELS

__all__ = ["KERNELS", "Kernels", "kernels", "compiled_available", "compiled_problem", "resolve", "BACKENDS",
           "BackendError"]

BACKENDS = ("auto", "python", "compiled")
"""What ``engine.backend`` may say."""

ENV = "KVSIM_BACKEND"
"""Environment variable that overrides ``auto`` (``python`` or ``compiled``)."""


class BackendError(RuntimeError):
    """The compiled backend was asked for where it is not built (or is stale)."""


class Kernels(NamedTuple):
    """The kernel modules of one backend, by short name."""

    name: str  # "python" or "compiled"
    levels: ModuleType
    step_time: ModuleType
    engine_time: ModuleType
    sequence: ModuleType
    block_pool: ModuleType
    runs: ModuleType
    store: ModuleType
    index: ModuleType  # type: ignore[assignment]  # (kvsim.kv.index; shadows tuple.index, which no one calls)
    decode_run: ModuleType
    scheduler: ModuleType
    instance: ModuleType
    load_board: ModuleType
    engine_loop: ModuleType
    frontend: ModuleType
    filling: ModuleType
    flows: ModuleType
    block_hash: ModuleType  # prompt block ids (kvsim.workload.prefix hashes with it)


def compiled_name(module: str) -> str:
    """``kvsim.models.step_time`` -> ``kvsim._compiled.models_step_time``."""
    return "kvsim._compiled." + module.removeprefix("kvsim.").replace(".", "_")


def _source_digest(module: str) -> str:
    """SHA-256 of a kernel's source and, if it has one, its ``.pxd`` (its classes' field types)."""
    path = Path(__file__).resolve().parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
    digest = hashlib.sha256(path.read_bytes())
    if path.with_suffix(".pxd").exists():
        digest.update(path.with_suffix(".pxd").read_bytes())
    return digest.hexdigest()


def _compiled_modules() -> dict[str, ModuleType]:
    """The compiled kernel modules by source module name (ImportError where not built)."""
    from kvsim._compiled import (  # type: ignore[attr-defined]  # built by setup.py
        kv_block_pool,
        kv_index,
        kv_runs,
        kv_store,
        metrics_engine_time,
        metrics_levels,
        models_step_time,
        network_filling,
        network_flows,
        serving_decode_run,
        serving_engine_loop,
        serving_instance,
        serving_load_board,
        serving_scheduler,
        serving_sequence,
        sim_frontend,
        workload_block_hash,
    )

    return {"kvsim.models.step_time": models_step_time, "kvsim.metrics.levels": metrics_levels,
            "kvsim.metrics.engine_time": metrics_engine_time, "kvsim.serving.decode_run": serving_decode_run,
            "kvsim.serving.sequence": serving_sequence, "kvsim.kv.block_pool": kv_block_pool,
            "kvsim.kv.runs": kv_runs, "kvsim.kv.store": kv_store, "kvsim.kv.index": kv_index,
            "kvsim.serving.scheduler": serving_scheduler, "kvsim.serving.instance": serving_instance,
            "kvsim.serving.load_board": serving_load_board, "kvsim.serving.engine_loop": serving_engine_loop,
            "kvsim.sim.frontend": sim_frontend,
            "kvsim.network.filling": network_filling, "kvsim.network.flows": network_flows,
            "kvsim.workload.block_hash": workload_block_hash}


def _python_modules() -> dict[str, ModuleType]:
    from kvsim.kv import block_pool, index, runs, store
    from kvsim.metrics import engine_time, levels
    from kvsim.models import step_time
    from kvsim.network import filling, flows
    from kvsim.serving import decode_run, engine_loop, instance, load_board, scheduler, sequence
    from kvsim.sim import frontend
    from kvsim.workload import block_hash

    return {"kvsim.models.step_time": step_time, "kvsim.metrics.levels": levels,
            "kvsim.metrics.engine_time": engine_time, "kvsim.serving.decode_run": decode_run,
            "kvsim.serving.sequence": sequence, "kvsim.kv.block_pool": block_pool,
            "kvsim.kv.runs": runs, "kvsim.kv.store": store, "kvsim.kv.index": index,
            "kvsim.serving.scheduler": scheduler, "kvsim.serving.instance": instance,
            "kvsim.serving.load_board": load_board, "kvsim.serving.engine_loop": engine_loop,
            "kvsim.sim.frontend": frontend,
            "kvsim.network.filling": filling, "kvsim.network.flows": flows,
            "kvsim.workload.block_hash": block_hash}


@cache
def compiled_problem() -> str | None:
    """Why the compiled backend cannot run here (None if it can): not built, or built from other
    sources than the ones installed (an edit since the build would make the backends drift)."""
    try:
        modules = _compiled_modules()
    except ImportError as error:
        return f"not built ({error})"
    for module in KERNELS:
        compiled = modules[module]
        if getattr(compiled, "KVSIM_SOURCE_SHA256", None) != _source_digest(module):
            return (f"{compiled_name(module)} was built from another version of {module}; "
                    f"rebuild with `pip install -e .`")
    return None


def compiled_available() -> bool:
    """Whether the compiled kernels are built and match the installed sources."""
    return compiled_problem() is None


def resolve(choice: str) -> str:
    """The backend a run with ``engine.backend: choice`` uses: ``python`` or ``compiled``.

    Raises
    ------
    BackendError
        ``compiled`` asked for (in the scenario or ``KVSIM_BACKEND``) where it cannot run.
    ValueError
        An unknown choice.
    """
    if choice not in BACKENDS:
        raise ValueError(f"engine.backend must be one of {', '.join(BACKENDS)}, not {choice!r}")
    if choice == "auto":
        forced = os.environ.get(ENV, "").strip()
        if forced:
            if forced not in ("python", "compiled"):
                raise ValueError(f"{ENV} must be python or compiled, not {forced!r}")
            choice = forced
        else:
            return "compiled" if compiled_available() else "python"
    if choice == "compiled":
        problem = compiled_problem()
        if problem is not None:
            raise BackendError(f"the compiled backend cannot run here: {problem}")
    return choice


@cache
def kernels(backend: str) -> Kernels:
    """The kernel modules of ``backend`` (``python`` or ``compiled``; see :func:`resolve`)."""
    if backend not in ("python", "compiled"):
        raise ValueError(f"a resolved backend is python or compiled, not {backend!r}")
    if backend == "compiled":
        resolve("compiled")  # a clear error, not an ImportError, where it is not built
    modules = _python_modules() if backend == "python" else _compiled_modules()
    return Kernels(backend, **{module.rsplit(".", 1)[1]: modules[module] for module in KERNELS})
