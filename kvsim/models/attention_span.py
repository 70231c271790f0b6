"""What each token attends to when some layers use sliding-window attention.

A model with ``S`` of its ``L`` layers windowed to ``W`` tokens (Mistral, Gemma, gpt-oss) keeps,
per sequence of ``n`` tokens, the KV of all ``n`` tokens in its full-attention layers but only of
the last ``W`` in its sliding layers; a query attends to all earlier tokens in a full layer and to
at most ``W`` in a sliding one. The engine model counts KV and attention per token averaged over
layers, so with ``f = S / L``::

    resident KV tokens of a sequence of n tokens = (1 - f) * n + f * min(n, W)
    attention pairs of a chunk of c after p      = (1 - f) * [c p + c (c + 1) / 2]
                                                   + f * sum_{x = p+1}^{p+c} min(x, W)

(the query at position ``x`` sees ``x`` tokens, itself included). vLLM's hybrid KV-cache manager
frees a sliding layer's pages once they leave the window; the page in which the window starts is
kept whole, which this per-token count ignores (at most one page per sequence).
"""

from __future__ import annotations

__all__ = ["AttentionSpan", "held_kv_bytes"]


class AttentionSpan:
    """Per-token attention and KV counts of a model with sliding-window layers.

    Parameters
    ----------
    window_tokens : int
        The sliding window ``W``, tokens.
    sliding_fraction : float
        Share of the layers that are windowed, ``S / L`` (0 < f <= 1).
    """

    __slots__ = ("window", "fraction", "full")

    def __init__(self, window_tokens: int, sliding_fraction: float):
        if window_tokens < 1 or not 0.0 < sliding_fraction <= 1.0:
            raise ValueError("a sliding window needs W >= 1 tokens over a fraction 0 < f <= 1 of the layers")
        self.window = int(window_tokens)
        self.fraction = float(sliding_fraction)
        self.full = 1.0 - self.fraction

    def windowed_pairs(self, chunk: int, cached: int) -> float:
        """``sum_{x=cached+1}^{cached+chunk} min(x, W)``: pairs of a chunk inside the window."""
        w, lo, hi = self.window, cached + 1, cached + chunk
        if hi <= w:
            return chunk * cached + chunk * (chunk + 1) / 2.0
        if lo > w:
            return float(chunk * w)
        below = w - cached  # queries at positions cached+1 .. w see their whole prefix
        return (w * (w + 1) - cached * (cached + 1)) / 2.0 + (chunk - below) * w

    def pairs(self, chunk: int, cached: int) -> float:
        """Attention pairs of a chunk of ``chunk`` tokens after ``cached``, averaged over layers."""
        full = chunk * cached + chunk * (chunk + 1) / 2.0
        return self.full * full + self.fraction * self.windowed_pairs(chunk, cached)

    def context(self, tokens: int) -> float:
        """KV tokens a sequence of ``tokens`` keeps (or one query reads), averaged over layers."""
        return self.full * tokens + self.fraction * min(tokens, self.window)


def held_kv_bytes(tokens: int, kv_bytes_per_token: float, span: AttentionSpan | None) -> float:
    """KV bytes the pages of a sequence of ``tokens`` hold: what moving that sequence moves.

    Parameters
    ----------
    tokens : int
        The sequence's tokens ``n``.
    kv_bytes_per_token : float
        KV bytes one token occupies over all layers (of one card, or of the whole model), bytes.
    span : AttentionSpan or None
        The model's sliding-window layers (None: every layer attends to everything).

    Returns
    -------
    float
        Bytes: every layer's share of ``kv_bytes_per_token`` for each token it keeps, i.e. the
        full layers x ``n`` plus the sliding layers x ``min(n, W)``; ``n * kv_bytes_per_token``
        without a window. Layers are assumed to hold equal KV per token (true of the catalog's
        windowed models, whose sliding and full layers have the same KV heads).
    """
    if span is None:
        return tokens * kv_bytes_per_token
    return kv_bytes_per_token * span.context(tokens)
