"""Cache prewarm: prompts drawn independently from the scenario's workload, to fill the tiers
below HBM before the run as a long-running cache would hold them."""

from __future__ import annotations

from kvsim.rng import DerivedStreams, RandomStreams
from kvsim.workload import ClientStream, WorkloadSpec, open_loop_requests

__all__ = ["warm_prompts", "MAX_WARM_REQUESTS"]

MAX_WARM_REQUESTS = 200_000


def warm_prompts(workload: WorkloadSpec, duration_s: float, streams: RandomStreams, block_tokens: int):
    """Full-block hash lists of requests drawn independently from ``workload`` (for prewarm).

    Yields up to :data:`MAX_WARM_REQUESTS` prompts, drawn from streams named ``prewarm.*``.
    """
    world = ("workload.prefix.document_tokens",)  # which documents exist is shared, not redrawn
    derived = DerivedStreams(streams, "prewarm", shared=world)
    if workload.closed_loop:
        clients = [ClientStream(workload, c, derived, namespace="prewarm")
                   for c in range(workload.arrival.clients)]
        for k in range(MAX_WARM_REQUESTS):
            request = clients[k % len(clients)].next_request_with_hashes()
            yield request.hash_ids[: request.input_tokens // block_tokens]
        return
    produced = 0
    for round_ in range(1_000):
        batch = open_loop_requests(workload, duration_s, derived, namespace=f"prewarm.{round_}")
        if not batch.hash_ids:
            return
        for tokens, hashes in zip(batch.input_tokens.tolist(), batch.hash_ids):
            yield hashes[: tokens // block_tokens]
            produced += 1
            if produced >= MAX_WARM_REQUESTS:
                return
        # a fresh, independent batch; named from the run's own streams, not nested in the last
        # round's (a short duration takes many rounds, and nesting would recurse once per round)
        derived = DerivedStreams(streams, f"prewarm.round{round_}", shared=world)
