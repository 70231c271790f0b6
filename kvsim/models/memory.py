"""Device memory an engine keeps out of the KV cache, computed the way vLLM sizes it.

vLLM gives the KV cache what is left of ``gpu_memory_utilization x device memory`` after the
weights, the peak of a profiling forward pass over ``max_num_batched_tokens`` dummy tokens
(plus a dummy sampling step over ``max_num_seqs`` rows of logits), and memory outside PyTorch's
allocator (CUDA graphs, NCCL buffers, cuBLAS workspaces). Per card::

    reserve = max_batched_tokens * 2 * hidden * 2 B            (residual + hidden states, bf16)
            + max_num_seqs * vocab * 4 B * SAMPLER_COPIES       (fp32 logits, probabilities,
                                                                 sorted copies for top-k/top-p)
            + runtime_bytes                                     (graphs, NCCL, workspaces)

The token term is what vLLM's reported KV capacity moves by when only the token budget changes
(Qwen2.5-7B on one H100: 16 fewer 16-token blocks, 14.7 MB, at 2048 than at 1024 tokens: 14.3 KB
= 2 x 3584 x 2 B per token; ../shared/calibration runs 64 and 66). ``SAMPLER_COPIES`` 4 and the
runtime default of 1 GiB are assumptions (L).
"""

from __future__ import annotations

from kvsim.models.llm import ModelSpec

__all__ = ["activation_reserve_bytes", "SAMPLER_COPIES"]

SAMPLER_COPIES = 4
"""fp32 vocab-wide rows the sampler holds at once per sequence (assumption)."""


def activation_reserve_bytes(model: ModelSpec, max_batched_tokens: int, max_num_seqs: int,
                             runtime_bytes: float) -> float:
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
    """
    hidden_states = max_batched_tokens * 2 * model.hidden_size * 2
    logits = min(max_num_seqs, max_batched_tokens) * model.vocab_size * 4 * SAMPLER_COPIES
    return hidden_states + logits + runtime_bytes
