"""A multimodal checkpoint's vision tower: its weights and the encoder pass vLLM profiles.

A checkpoint such as Llama 4 Scout ships a vision tower (a ViT whose patches are merged by a
pixel-shuffle adapter) and a projector into the text model. vLLM loads both for text prompts too,
unless images are turned off (``--limit-mm-per-prompt '{"image": 0}'``), and runs one encoder pass
over dummy images of the largest size before it sizes the KV cache. The numbers here are those of
the checkpoint's ``vision_config`` and of its image processor (``max_patches``: tiles per image).

What vLLM builds and profiles (vLLM v0.15.1, the wheel of commit 1892993bc):

- ``vllm/model_executor/models/mllama4.py``: ``Llama4ForConditionalGeneration`` builds
  ``vision_model`` and ``multi_modal_projector`` with ``quant_config=None`` (the model's 16-bit
  dtype, whatever the checkpoint quantises), split over the tensor-parallel group (default
  ``mm_encoder_tp_mode`` "weights": ``QKVParallelLinear``, ``ColumnParallelLinear``,
  ``RowParallelLinear``; embeddings, layer norms and row-parallel biases replicated). The dummy
  image is ``max_patches`` tiles high (``get_image_size_with_most_features``): that many tiles plus
  a global tile, each ``(image_size / patch_size) ** 2`` patches and a class token in the ViT and
  ``pixel_shuffle_ratio ** 2`` as many embeddings for the text model (``get_patch_per_chunk``).
- ``vllm/v1/worker/gpu_model_runner.py`` ``profile_run``: the encoder runs on a batch of
  ``max_items_per_batch`` dummy images, its outputs stay in the encoder cache while the text
  model's dummy pass and the sampler run, then are freed; the KV cache gets what is left of the
  peak (``vllm/utils/mem_utils.py`` ``memory_profiling``).
- ``vllm/v1/worker/utils.py`` ``MultiModalBudget.get_max_items`` with
  ``vllm/v1/core/encoder_cache_manager.py`` ``compute_mm_encoder_budget``: the budget is
  ``max(max_num_batched_tokens, tokens per image)``; images per batch
  ``max(1, min(budget // tokens per image, max_num_seqs x images per prompt))`` (the cap by
  ``max_model_len // tokens per image`` is left out: it binds only for tiny ``max_num_seqs``).
  Images per prompt default to 999 (``vllm/config/multimodal.py``); 0 skips the tower and its
  profile (``interfaces.py`` ``_mark_tower_model``), ``--skip-mm-profiling`` only the profile.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from kvsim.dtypes import DTYPE_BYTES
from kvsim.spec_types import FrozenSpec, field_errors

__all__ = ["VisionTowerSpec", "VLLM_DEFAULT_IMAGES_PER_PROMPT"]

VLLM_DEFAULT_IMAGES_PER_PROMPT = 999
"""vLLM's ``limit_mm_per_prompt`` for a modality not given (``vllm/config/multimodal.py``)."""

_Size = Annotated[int, Field(ge=1, le=2**31 - 1)]


class VisionTowerSpec(FrozenSpec):
    """A Llama-4-style vision tower and projector, as in the ``vision_config`` of ``config.json``.

    ``max_tiles`` is the image processor's ``max_patches`` (tiles of ``image_size`` pixels per
    image, before the global tile). ``dtype`` is the format vLLM holds the tower in: the model's
    16-bit dtype, even in an FP8 checkpoint.
    """

    hidden_size: _Size
    intermediate_size: _Size
    num_layers: _Size
    num_attention_heads: _Size
    image_size: _Size
    patch_size: _Size
    num_channels: _Size = 3
    pixel_shuffle_ratio: float = Field(gt=0.0, le=1.0)
    projector_input_dim: _Size
    projector_output_dim: _Size
    vision_output_dim: _Size
    projector_bias: bool = False
    max_tiles: _Size
    dtype: str = "bf16"

    @model_validator(mode="after")
    def _consistent(self) -> VisionTowerSpec:
        problems: list[tuple[tuple[str | int, ...], str, object]] = []
        if self.image_size % self.patch_size:
            problems.append((("patch_size",), f"image_size {self.image_size} is not a whole number of "
                             f"{self.patch_size}-pixel patches", self.patch_size))
        elif self.patches_per_tile * self.pixel_shuffle_ratio ** 2 % 1:
            problems.append((("pixel_shuffle_ratio",), f"{self.patches_per_tile} patches per tile do not shuffle "
                             f"into whole embeddings at ratio {self.pixel_shuffle_ratio:g}", self.pixel_shuffle_ratio))
        if self.dtype not in DTYPE_BYTES:
            problems.append((("dtype",), f"unknown dtype; known: {', '.join(DTYPE_BYTES)}", self.dtype))
        if problems:
            raise field_errors(VisionTowerSpec, problems)
        return self

    # ---- shapes ----------------------------------------------------------------------------
    @property
    def patches_per_tile(self) -> int:
        """ViT patches of one tile: ``(image_size / patch_size) ** 2`` (no class token)."""
        return (self.image_size // self.patch_size) ** 2

    @property
    def tiles_per_image(self) -> int:
        """Tiles the ViT encodes for the largest image: ``max_tiles`` plus the global tile."""
        return self.max_tiles + 1 if self.max_tiles > 1 else 1

    @property
    def tokens_per_image(self) -> int:
        """Text-model embeddings of the largest image (what vLLM's encoder budget counts)."""
        return self.tiles_per_image * round(self.patches_per_tile * self.pixel_shuffle_ratio ** 2)

    # ---- parameters ------------------------------------------------------------------------
    def _params(self, text_hidden: int) -> tuple[int, int]:
        """(parameters split over the TP group, parameters every card holds)."""
        h, i, layers = self.hidden_size, self.intermediate_size, self.num_layers
        p_in, p_out = self.projector_input_dim, self.projector_output_dim
        split = self.num_channels * self.patch_size ** 2 * h  # patch embedding (column-parallel, no bias)
        kept = h + (self.patches_per_tile + 1) * h + 4 * h  # class + position embeddings, pre/post norms
        # per layer: qkv with biases, o, fc1 with bias, fc2 split; o and fc2 biases, two norms kept
        split += layers * (3 * (h * h + h) + h * h + (h * i + i) + i * h)
        kept += layers * (2 * h + 4 * h)
        adapter_bias = self.projector_bias
        split += i * p_in + (p_in if adapter_bias else 0) + p_in * p_out  # adapter fc1, fc2
        kept += p_out if adapter_bias else 0  # fc2 (row-parallel) bias
        split += self.vision_output_dim * text_hidden  # projector (column-parallel, no bias)
        return split, kept

    def params(self, text_hidden: int) -> int:
        """Parameters of the tower, its adapter and the projector into ``text_hidden``."""
        split, kept = self._params(text_hidden)
        return split + kept

    def bytes_per_card(self, text_hidden: int, tp: int) -> float:
        """Bytes one card of a TP group of ``tp`` holds (vLLM's default "weights" mode)."""
        split, kept = self._params(text_hidden)
        return (split / tp + kept) * DTYPE_BYTES[self.dtype]

    # ---- the profiling pass ----------------------------------------------------------------
    def images_per_batch(self, max_batched_tokens: int, max_num_seqs: int, images_per_prompt: int) -> int:
        """Dummy images vLLM encodes in its profiling pass (0 with images turned off)."""
        if images_per_prompt <= 0:
            return 0
        budget = max(max_batched_tokens, self.tokens_per_image)
        return max(1, min(budget // self.tokens_per_image, max_num_seqs * images_per_prompt))

    def encoder_peak_bytes(self, images: int, tp: int) -> float:
        """Activation bytes one card holds at the peak of the encoder pass over ``images``.

        The pixels (``channels x image_size ** 2`` per tile) plus, inside one ViT layer's MLP, the
        residual stream and the fc1 output and its GELU (``intermediate_size / tp`` each) over
        every tile's patches and class token; 16-bit. Attention is fused (no score matrix).
        """
        tiles = images * self.tiles_per_image
        seq = self.patches_per_tile + 1
        pixels = self.num_channels * self.image_size ** 2
        return tiles * (pixels + seq * (self.hidden_size + 2 * self.intermediate_size / tp)) * DTYPE_BYTES[self.dtype]

    def encoder_output_bytes(self, images: int, text_hidden: int) -> float:
        """Bytes of the projected image embeddings the encoder cache keeps through the text
        model's profiling pass (gathered: every card holds them whole)."""
        return images * self.tokens_per_image * text_hidden * DTYPE_BYTES[self.dtype]
