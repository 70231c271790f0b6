"""Calibration: fit a few physical parameters of one card/model family to measurements, and
compare kvsim's predictions with them (``kvsim calibrate``, ``docs/validation.md``).

- :mod:`.measurements` reads measured data (vLLM request-level runs, per-iteration step tables);
- :mod:`.bench_files` reads benchmark result files directly (``vllm bench serve --save-result``,
  GuideLLM, inference-perf), with the engine settings from a YAML sidecar (:mod:`.bench_sidecar`);
  :mod:`.bench_runs` builds their workloads (per-request lengths replayed);
- :mod:`.runs` turns a measured run into a kvsim scenario and predicts its metrics;
- :mod:`.steps` predicts per-iteration step times straight from the step-time model;
- :mod:`.parameters` names the parameters a fit may move: where each applies, bounds, default;
- :mod:`.fit` fits them (log-ratio least squares) with leave-one-out errors;
- :mod:`.calibfile` writes and applies ``calib.yaml`` (a scenario's ``calibration:`` field);
- :mod:`.report` renders ``docs/validation.md`` from a results table.

The names below are imported when first read (a module ``__getattr__``, PEP 562): loading a
scenario applies its ``calibration:`` field through :mod:`.calibfile` without loading the
measurement readers.
"""

__all__ = ["MeasurementError", "StepPoint", "VllmRun", "read_measurements"]


def __getattr__(name: str) -> object:
    if name not in __all__:
        raise AttributeError(f"module 'kvsim.calibration' has no attribute {name!r}")
    from kvsim.calibration import measurements

    value = getattr(measurements, name)
    globals()[name] = value  # later reads are plain lookups (and a patched value stays as set)
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
