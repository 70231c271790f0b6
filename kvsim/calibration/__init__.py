"""Calibration: fit a few physical parameters of one card/model family to measurements, and
compare kvsim's predictions with them (``kvsim calibrate``, ``docs/validation.md``).

- :mod:`.measurements` reads measured data (vLLM request-level runs, per-iteration step tables);
- :mod:`.runs` turns a measured run into a kvsim scenario and predicts its metrics;
- :mod:`.steps` predicts per-iteration step times straight from the step-time model;
- :mod:`.parameters` names the parameters a fit may move: where each applies, bounds, default;
- :mod:`.fit` fits them (log-ratio least squares) with leave-one-out errors;
- :mod:`.calibfile` writes and applies ``calib.yaml`` (a scenario's ``calibration:`` field);
- :mod:`.report` renders ``docs/validation.md`` from a results table.
"""

from kvsim.calibration.measurements import MeasurementError, StepPoint, VllmRun, read_measurements

__all__ = ["MeasurementError", "StepPoint", "VllmRun", "read_measurements"]
