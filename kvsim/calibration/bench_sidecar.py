"""The engine settings of a benchmark result file: its YAML sidecar.

A ``vllm bench serve --save-result`` JSON, a GuideLLM report or an inference-perf stage report
records the load and the latencies, not the engine that served them. Those settings come from a
small YAML file beside the measurement, the **sidecar**, found by name (the first that exists):

1. ``<stem>.kvsim.yaml`` -- the measurement file's name without its last suffix
   (``run1.json`` -> ``run1.kvsim.yaml``): settings of that file only;
2. ``kvsim.yaml`` in the same folder: settings of every result file there (an inference-perf
   report folder holds one ``stage_N_lifecycle_metrics.json`` per stage, all from one engine).

Fields (unknown ones are refused, as are wrong types, each with its line)::

    model: meta-llama/Llama-3.1-8B-Instruct   # HF id or kvsim catalog name; optional for vLLM
                                              # (its file names model_id)
    gpu: H100-SXM-80GB        # a GPU kvsim reproduces (kvsim.calibration.runs.GPU_NODES)
    tp: 1                     # tensor-parallel cards
    precision: BF16           # FP16, BF16 or FP8 weights
    max_num_seqs: 256
    max_num_batched_tokens: 8192
    prefix_cache: true        # vLLM --enable-prefix-caching (true/false, on/off)
    # optional, the workload when the file has no per-request lengths:
    input_tokens: 1024        # the fixed prompt length it was run with (--random-input-len)
    output_tokens: 128        # the fixed output length (--random-output-len, with ignore_eos)
    # optional: the serving engine and its version, for what that version fixes (vLLM 0.10.0 to
    # 0.23.x tokenise prompts in 2 ms micro-batches: kvsim.calibration.runs.engine_settings)
    engine: vLLM
    engine_version: 0.15.1
    # optional, inference-perf only: its config's data.shared_prefix block, as written there
    shared_prefix: {num_unique_system_prompts: 10, num_users_per_system_prompt: 10,
                    system_prompt_len: 128, question_len: 64, output_len: 64}
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvsim.calibration.checks import MAX_BATCHED_TOKENS, MAX_CARDS, MAX_PROMPTS, MAX_SEQS, engine_version
from kvsim.workload.trace_csv import MAX_TOKENS
from kvsim.yaml_io import Located, SpecError, did_you_mean, load_yaml, read_utf8

__all__ = ["Engine", "SIDECAR_SUFFIX", "FOLDER_SIDECAR", "find_sidecar", "read_sidecar"]

SIDECAR_SUFFIX = ".kvsim.yaml"
FOLDER_SIDECAR = "kvsim.yaml"
_PRECISIONS = ("FP16", "BF16", "FP8")
_SHARED_PREFIX_KEYS = ("num_unique_system_prompts", "num_users_per_system_prompt", "system_prompt_len",
                       "question_len", "output_len")
"""inference-perf's ``data.shared_prefix`` fields (kubernetes-sigs/inference-perf
``inference_perf/config`` ``SharedPrefix``; the demo ``demos/kubecon-na-2025/config.yaml``)."""
_FIELDS = ("model", "gpu", "tp", "precision", "max_num_seqs", "max_num_batched_tokens", "prefix_cache",
           "input_tokens", "output_tokens", "shared_prefix", "engine", "engine_version")
_REQUIRED = ("gpu", "tp", "precision", "max_num_seqs", "max_num_batched_tokens", "prefix_cache")


@dataclass(frozen=True)
class Engine:
    """Engine settings of a benchmark result file, from its sidecar (``path``)."""

    path: str
    model: str | None
    gpu: str
    tp: int
    precision: str
    max_num_seqs: int
    max_batched_tokens: int
    prefix_cache: bool
    input_tokens: int | None = None
    output_tokens: int | None = None
    shared_prefix: tuple[int, int, int, int, int] | None = None  # groups, users, system, question, output
    engine: str = ""
    engine_version: str = ""


def find_sidecar(measurement: Path) -> Path | None:
    """The sidecar of ``measurement`` (see the module docstring), or None."""
    own = measurement.with_name(measurement.stem + SIDECAR_SUFFIX)
    if own.is_file():
        return own
    folder = measurement.with_name(FOLDER_SIDECAR)
    return folder if folder.is_file() else None


def read_sidecar(measurement: Path, needs_model: bool) -> Engine:
    """The engine settings of ``measurement``; ``needs_model``: its format names no model.

    Raises
    ------
    SpecError
        No sidecar (naming the file and where it looked), or one field per problem with its line.
    """
    from kvsim.calibration.runs import GPU_NODES

    path = find_sidecar(measurement)
    if path is None:
        raise SpecError([f"{measurement}: the engine settings are not in this file: write them in "
                         f"{measurement.stem}{SIDECAR_SUFFIX} beside it (or {FOLDER_SIDECAR} for the folder): "
                         f"{', '.join(_REQUIRED)}" + (", model" if needs_model else "")
                         + " (docs/how-to/calibrate-from-vllm.md)"])
    _, text = read_utf8(path, "engine sidecar")
    doc = load_yaml(text, str(path))
    if not isinstance(doc.data, dict):
        raise SpecError([doc.problem((), "expected a mapping of engine settings (gpu: ..., tp: ..., ...)")])
    problems: list[str] = []
    data = doc.data
    for key in data:
        if key not in _FIELDS:
            problems.append(doc.problem((key,), f"unknown field{did_you_mean(key, _FIELDS)}; known: {', '.join(_FIELDS)}"))
    for key in _REQUIRED + (("model",) if needs_model else ()):
        if key not in data:
            problems.append(f"{path}: {key}: required (the engine setting {measurement.name} does not state)")
    get = _Fields(doc, problems)
    model = get.text("model")
    gpu = get.text("gpu")
    if gpu is not None and gpu not in GPU_NODES:
        get.bad(("gpu",), f"{gpu!r} is no GPU kvsim reproduces; known: {', '.join(GPU_NODES)}")
    precision = get.text("precision")
    if precision is not None and not precision.upper().startswith(_PRECISIONS):
        get.bad(("precision",), f"expected FP16, BF16 or FP8, got {precision!r}")
    tp = get.count(("tp",), MAX_CARDS)
    seqs = get.count(("max_num_seqs",), MAX_SEQS)
    budget = get.count(("max_num_batched_tokens",), MAX_BATCHED_TOKENS)
    if seqs is not None and budget is not None and budget < seqs:
        get.bad(("max_num_batched_tokens",), f"{budget:,} is below max_num_seqs {seqs:,}: vLLM refuses such an engine")
    cache = data.get("prefix_cache")
    if isinstance(cache, str) and cache.lower() in ("on", "off"):
        cache = cache.lower() == "on"
    if "prefix_cache" in data and not isinstance(cache, bool):
        get.bad(("prefix_cache",), f"expected true or false (on/off), got {cache!r}")
    inputs, outputs = get.count(("input_tokens",), MAX_TOKENS), get.count(("output_tokens",), MAX_TOKENS)
    shared = _shared_prefix(get, data.get("shared_prefix"))
    name = get.text("engine") or ""
    version = data.get("engine_version")
    if isinstance(version, (int, float)) and not isinstance(version, bool):
        version = str(version)  # (YAML reads 0.15 as a number)
    if version is not None and not (isinstance(version, str) and engine_version(version) is not None):
        get.bad(("engine_version",), f"expected a version such as 0.15.1, got {version!r}")
    if problems:
        raise SpecError(problems)
    return Engine(str(path), model, gpu, tp, precision.upper(), seqs, budget, cache, inputs, outputs, shared,
                  name, str(version or ""))


def _shared_prefix(get: _Fields, block: Any) -> tuple[int, int, int, int, int] | None:
    if block is None:
        return None
    if not isinstance(block, dict):
        get.bad(("shared_prefix",), "expected inference-perf's data.shared_prefix mapping "
                                    f"({', '.join(_SHARED_PREFIX_KEYS)})")
        return None
    for key in block:
        if key not in _SHARED_PREFIX_KEYS:
            get.bad(("shared_prefix", key), f"unknown field{did_you_mean(key, _SHARED_PREFIX_KEYS)}")
    values = []
    for key in _SHARED_PREFIX_KEYS:
        if key not in block:
            get.bad(("shared_prefix",), f"{key}: required")
            values.append(None)
        else:
            high = MAX_PROMPTS if key.startswith("num_") else MAX_TOKENS
            values.append(get.count(("shared_prefix", key), high, low=0 if key == "question_len" else 1))
    if None in values:
        return None
    groups, users, system, question, output = values
    if groups * users > MAX_PROMPTS:
        get.bad(("shared_prefix",), f"{groups * users:,} distinct prompts: more than {MAX_PROMPTS:,}")
        return None
    if system + question < 2:
        get.bad(("shared_prefix",), "a prompt of fewer than 2 tokens (system_prompt_len + question_len)")
        return None
    return groups, users, system, question, output


class _Fields:
    """Typed reads of a sidecar's fields; each problem names file, line and field."""

    def __init__(self, doc: Located, problems: list[str]):
        self.doc, self.problems = doc, problems

    def bad(self, path: tuple, message: str) -> None:
        self.problems.append(self.doc.problem(path, message))

    def _value(self, path: tuple) -> Any:
        value: Any = self.doc.data
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        return value

    def text(self, key: str) -> str | None:
        value = self._value((key,))
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            self.bad((key,), f"expected a name, got {value!r}")
            return None
        return value.strip()

    def count(self, path: tuple, high: int, low: int = 1) -> int | None:
        value = self._value(path)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.bad(path, f"expected a whole number, got {value!r}")
            return None
        if not low <= value <= high:
            self.bad(path, f"must be from {low} to {high:,}, got {value:,}")
            return None
        return value
