"""Device memory an engine keeps out of the KV cache, computed the way vLLM sizes it.

vLLM gives the KV cache what is left of ``gpu_memory_utilization x device memory`` after what
loading the model took, the peak of a profiling forward pass over ``max_num_batched_tokens``
dummy tokens (plus a dummy sampling step over ``max_num_seqs`` rows of logits), and memory
outside PyTorch's allocator (CUDA graphs, NCCL buffers, cuBLAS workspaces). Per card::

    loaded  = weights
            + max_position_embeddings * rotary_dim * 2 B        (the RoPE cos/sin table)
            + vision tower and projector                        (multimodal checkpoints)
    reserve = max(encoder peak, encoder outputs + text peak)    (the profiling pass)
            + runtime_bytes                                     (graphs, NCCL, workspaces)
    text peak = max_batched_tokens * 2 * hidden * 2 B           (residual + hidden states, bf16)
              + max_num_seqs * vocab * 4 B * SAMPLER_COPIES     (fp32 logits, probabilities,
                                                                 sorted copies for top-k/top-p)

The token term is what vLLM's reported KV capacity moves by when only the token budget changes
(Qwen2.5-7B on one H100: 16 fewer 16-token blocks, 14.7 MB, at 2048 than at 1024 tokens: 14.3 KB
= 2 x 3584 x 2 B per token; ../shared/calibration runs 64 and 66). ``SAMPLER_COPIES`` 4 and the
runtime default of 1 GiB are assumptions (L).

The RoPE table: vLLM builds one ``cos_sin_cache`` of ``max_position_embeddings x rotary_dim``
in the model's dtype, shared by every rotary layer, on the device while it loads the model, for
the configured length whatever ``max_model_len`` (vLLM v0.15.1, wheel of commit 1892993bc:
``vllm/model_executor/layers/rotary_embedding/base.py`` ``RotaryEmbedding.__init__`` and
``_compute_cos_sin_cache``, ``__init__.py`` ``get_rope`` caching one instance per shape;
``vllm/model_executor/models/llama4.py`` passes ``config.max_position_embeddings``). Llama 4
Scout Instruct's 10,485,760 positions x 128 x 2 B make 2.68 GB on every card. It is counted
only for catalog models that give ``max_position_embeddings``. The vision terms are
:mod:`kvsim.models.vision`'s.
"""

from __future__ import annotations

from kvsim.models.llm import ModelSpec
from kvsim.models.vision import VLLM_DEFAULT_IMAGES_PER_PROMPT

__all__ = ["activation_reserve_bytes", "loaded_extra_bytes_per_card", "rope_table_bytes", "mm_profile_bytes",
           "SAMPLER_COPIES", "ROPE_TABLE_BYTES_PER_VALUE"]

SAMPLER_COPIES = 4
"""fp32 vocab-wide rows the sampler holds at once per sequence (assumption)."""

ROPE_TABLE_BYTES_PER_VALUE = 2
"""The RoPE table is held in the model's 16-bit dtype (``cache.to(dtype)``)."""


def rope_table_bytes(model: ModelSpec) -> float:
    """Bytes of the rotary-embedding table vLLM precomputes on every card: ``max_position_embeddings
    x rotary_dim x 2 B`` with ``rotary_dim`` the head dimension (the rope part of it for MLA).
    0 when the catalog gives no ``max_position_embeddings``."""
    if model.max_position_embeddings is None:
        return 0.0
    rotary_dim = model.mla.qk_rope_head_dim if model.mla is not None else model.head_dim
    return float(model.max_position_embeddings * rotary_dim * ROPE_TABLE_BYTES_PER_VALUE)


def _images(images_per_prompt: int | None) -> int:
    return VLLM_DEFAULT_IMAGES_PER_PROMPT if images_per_prompt is None else images_per_prompt


def loaded_extra_bytes_per_card(model: ModelSpec, tp: int, images_per_prompt: int | None = None) -> float:
    """Bytes per card loading the model takes besides its text weights: the RoPE table and, for a
    multimodal checkpoint whose images are not turned off (``images_per_prompt`` 0), the vision
    tower and projector split over the ``tp`` cards of the tensor-parallel group.

    Parameters
    ----------
    model : ModelSpec
    tp : int
        Tensor-parallel cards the vision tower is split over.
    images_per_prompt : int or None
        vLLM ``limit_mm_per_prompt`` for images (None: vLLM's default, 999).
    """
    extra = rope_table_bytes(model)
    if model.vision is not None and _images(images_per_prompt) > 0:
        extra += model.vision.bytes_per_card(model.hidden_size, tp)
    return extra


def mm_profile_bytes(model: ModelSpec, max_batched_tokens: int, max_num_seqs: int, tp: int,
                     images_per_prompt: int | None = None) -> tuple[float, float]:
    """(encoder activation peak, encoder outputs kept) of vLLM's multimodal profiling pass, bytes
    per card; (0, 0) for a text model or with images turned off."""
    vision = model.vision
    if vision is None:
        return 0.0, 0.0
    images = vision.images_per_batch(max_batched_tokens, max_num_seqs, _images(images_per_prompt))
    if images == 0:
        return 0.0, 0.0
    return vision.encoder_peak_bytes(images, tp), vision.encoder_output_bytes(images, model.hidden_size)


def activation_reserve_bytes(model: ModelSpec, max_batched_tokens: int, max_num_seqs: int,
                             runtime_bytes: float, tp: int = 1, images_per_prompt: int | None = None,
                             mm_profiling: bool = True) -> float:
    """Bytes per card an engine keeps for activations, sampling and its runtime.

    Parameters
    ----------
    model : ModelSpec
    max_batched_tokens : int
        Token budget of one iteration (the profiling pass's size).
    max_num_seqs : int
        Most sequences sampled in one iteration.
    runtime_bytes : float
        Memory outside the activation peak (CUDA graphs, communication buffers, workspaces), bytes.
    tp : int
        Tensor-parallel cards (the vision encoder's activations are split over them).
    images_per_prompt : int or None
        vLLM ``limit_mm_per_prompt`` for images (None: 999, vLLM's default; 0: no encoder pass).
    mm_profiling : bool
        False: vLLM's ``--skip-mm-profiling`` (the encoder pass is not profiled).
    """
    hidden_states = max_batched_tokens * 2 * model.hidden_size * 2
    logits = min(max_num_seqs, max_batched_tokens) * model.vocab_size * 4 * SAMPLER_COPIES
    text_peak = hidden_states + logits
    peak: float = text_peak
    if mm_profiling:
        encoder_peak, encoder_outputs = mm_profile_bytes(model, max_batched_tokens, max_num_seqs, tp,
                                                         images_per_prompt)
        peak = max(encoder_peak, encoder_outputs + text_peak)
    return peak + runtime_bytes
