"""When a cache prewarm has offered enough: the share of prompts whose shared blocks it never saw.

A prewarm (:meth:`kvsim.serving.cache.tiers.SystemCache.prewarm`) feeds the tiers below HBM
prompts drawn from the workload. A tier that fills and turns over holds what its policy keeps
(its own budget says when). A tier with room for everything keeps every block offered to it, so
what it still lacks is the shared content no prompt has offered yet: a future prompt reading it
misses in a warm cache but would hit in a long-running one. The share of prompts that do is
the *missing mass* of the prompts' shared content, and it is the hit rate (in prompts) a longer
prewarm could still add.

Each prompt's shared content is named by its first full block (its *lead*): a document's first
block in ``shared_documents``, the shared prefix's in ``fixed_hit``. Good's estimate of the
missing mass after ``n`` prompts is ``N1 / n``, ``N1`` the leads offered exactly once (I. J. Good,
"The population frequencies of species and the estimation of population parameters",
Biometrika 40, 1953); its expectation is the missing mass after ``n - 1`` prompts. ``N1`` is a
sum of nearly independent indicators (negatively correlated where the missing mass is small),
so it is taken as Poisson, and the rule uses the one-sided upper confidence bound of its mean
(Garwood's exact Poisson limit, ``gammaincinv(N1 + 1, confidence)``): the prewarm stops only
when, at that confidence, fewer than ``settle`` of future prompts would read shared content it
never offered. With no lead seen once, the bound is ``-ln(1 - confidence) / n`` (3.0 / n at
95 %): a small sample cannot pass.

This replaces a rule that stopped when the share of blocks already present changed by less than
0.005 between successive batches of 1,000 prompts: with many documents of nearly equal
popularity the share rises by less per batch than it jitters (one batch's share has a standard
deviation of about 0.016), so the test passed by chance while the tiers were still filling
(16,000 documents at Zipf 0.1: stopped after 12,000 prompts with about half the documents
stored). A prompt whose lead is its own (a document shorter than one block, a prompt with no
shared block) counts as a lead seen once for ever: the estimate errs towards warming longer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from scipy.special import gammaincinv

__all__ = ["UnofferedShare"]


class UnofferedShare:
    """Good-Turing estimate, with an upper confidence bound, of the share of future prompts whose
    shared content (named by its lead block id) has not been offered yet.

    Parameters
    ----------
    confidence : float
        One-sided confidence of :meth:`upper_bound` (default 0.95).
    """

    def __init__(self, confidence: float = 0.95):
        if not 0.0 < confidence < 1.0:
            raise ValueError(f"confidence must be in (0, 1), not {confidence}")
        self.confidence = float(confidence)
        self.prompts = 0
        self.once = 0  # N1: leads offered exactly once
        self._count: dict[int, int] = {}  # lead block id -> prompts that offered it (a dict: never iterated)

    def offer(self, hashes: Sequence[int] | NDArray[np.integer]) -> None:
        """Count one prompt, given its full blocks' ids (an empty prompt has no shared content)."""
        self.prompts += 1
        if len(hashes) == 0:
            return
        lead = int(hashes[0])
        seen = self._count.get(lead, 0)
        self._count[lead] = seen + 1
        if seen == 0:
            self.once += 1
        elif seen == 1:
            self.once -= 1

    def estimate(self) -> float:
        """Good's estimate ``N1 / n`` of the share of prompts reading unoffered shared content."""
        return self.once / self.prompts if self.prompts else 1.0

    def upper_bound(self) -> float:
        """The share's upper confidence bound: Garwood's Poisson limit of ``N1``, over ``n``."""
        if not self.prompts:
            return 1.0
        return float(gammaincinv(self.once + 1, self.confidence)) / self.prompts
