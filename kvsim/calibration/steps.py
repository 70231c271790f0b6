"""Per-iteration step times predicted straight from the step-time model (no simulation).

A step-table point (:class:`~kvsim.calibration.measurements.StepPoint`) measured, for a batch of
``b`` prompts of ``p`` tokens each:

- ``prompt_time``: one iteration prefilling all ``b * p`` tokens (the engines that produced the
  Splitwise table prefilled a batch in one pass, without chunking);
- ``token_time``: the mean decode iteration while each sequence generates ``T`` tokens, i.e.
  the mean over steps ``k = 1 .. T-1`` of an iteration of ``b`` sequences each attending to
  ``p + k`` tokens (``e2e = prompt_time + (T - 1) * token_time`` holds in the table).

The mean over ``k`` is taken on at most :data:`DECODE_SAMPLES` evenly spaced steps: an iteration's
time is piecewise linear in ``k`` (the larger of two linear roofline terms), so a trapezoid mean on
that grid is exact to well under 0.1 %.

The engine is a synchronous one (``async_scheduling: false``, so its host work adds to every
step): the tables are 2023 profiles, older than any engine that overlapped the two.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kvsim.calibration.measurements import StepPoint
from kvsim.calibration.parameters import apply_to_accelerator, engine_with
from kvsim.calibration.runs import GPU_NODES, MODEL_ALIASES, catalog_model
from kvsim.hardware import accelerator_catalog
from kvsim.models import model_catalog
from kvsim.models.step_time import BatchShape, RooflineStepTime

__all__ = ["STEP_METRICS", "DECODE_SAMPLES", "supported", "predict_step", "step_measured"]

STEP_METRICS = ("prompt_time_s", "token_time_s")
DECODE_SAMPLES = 65


def supported(point: StepPoint) -> str | None:
    """None if kvsim can predict ``point``, else why not (unknown model or hardware)."""
    if point.hardware not in GPU_NODES:
        return f"hardware {point.hardware!r} is not in the kvsim catalog (known: {', '.join(GPU_NODES)})"
    if point.model not in MODEL_ALIASES and point.model not in model_catalog():
        return f"model {point.model!r} is not in the kvsim catalog"
    return None


def step_measured(point: StepPoint) -> dict[str, float]:
    return {"prompt_time_s": point.prompt_time_s, "token_time_s": point.token_time_s}


def predict_step(point: StepPoint, values: Mapping[str, float] | None = None, dtype: str = "bf16") -> dict[str, float]:
    """Predicted ``prompt_time_s`` and ``token_time_s`` of ``point`` (seconds)."""
    model = model_catalog()[catalog_model(point.model)]
    accelerator = accelerator_catalog()[GPU_NODES[point.hardware][0]]
    if values:
        accelerator = apply_to_accelerator(accelerator, values)
    # the tables were profiled in 2023, before engines overlapped their host work with the GPU
    # (vLLM's async scheduling came in 2025, SGLang's overlap scheduler late 2024): a synchronous loop
    engine = engine_with(None, values or {}).model_copy(update={"async_scheduling": False})
    step = RooflineStepTime(model, accelerator, point.tp, dtype, dtype, engine=engine)
    b, p, t = point.batch, point.prompt_tokens, point.output_tokens
    prefill = BatchShape(prefill_tokens=b * p, prefill_seqs=b, prefill_pairs=b * BatchShape.prefill_chunk_pairs(p, 0),
                         sampled_seqs=b)
    ks = np.unique(np.linspace(1, max(t - 1, 1), min(DECODE_SAMPLES, max(t - 1, 1))).round().astype(int))
    decode = [step.iteration_time_s(BatchShape(decode_seqs=b, decode_context_tokens=b * (p + int(k)),
                                               sampled_seqs=b)) for k in ks]
    token_time = float(np.trapezoid(decode, ks) / (ks[-1] - ks[0])) if len(ks) > 1 else float(decode[0])
    first = step.breakdown(prefill)
    return {"prompt_time_s": first.total_s, "token_time_s": token_time}
