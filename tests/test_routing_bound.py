"""The infinite-cache bound of a request stream (closed form against a replay, and the trace
README's 37.4 %), and cache-aware routing on the Mooncake conversation trace on 128 instances
against that bound (issue 8, part 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import SHARED
from kvsim.kv import BlockStore, KVIndex
from kvsim.metrics.routing_summary import _hits_by_segments, cacheable_blocks, infinite_cache_hit_blocks

TRACE = SHARED / "traces" / "mooncake_conversation_trace.jsonl"
needs_trace = pytest.mark.skipif(not TRACE.exists(), reason=f"{TRACE} not present")


# ---------------------------------------------------------------------------------------------
# the infinite-cache bound
# ---------------------------------------------------------------------------------------------


def test_infinite_cache_hits_by_hand():
    lookups = [[1, 2, 3], [1, 2, 4], [1, 5], [], [1, 2, 4, 6], [7, 2]]
    # request 1 reuses 1, 2; request 2 reuses 1; request 4 reuses 1, 2, 4 (left by request 1);
    # request 5's second block was seen, but not its first, so nothing
    assert infinite_cache_hit_blocks(lookups).tolist() == [0, 2, 1, 0, 3, 0]
    # with what each request leaves (its output too), request 2 finds block 5 left by request 0
    holds = [[1, 2, 3, 5], [1, 2, 4], [1, 5], [], [1, 2, 4, 6], [7, 2]]
    assert infinite_cache_hit_blocks(lookups, holds).tolist() == [0, 2, 2, 0, 3, 0]
    # whole blocks only, and never the one holding the last prompt token
    assert cacheable_blocks(np.array([1, 15, 16, 17, 32, 33]), 16).tolist() == [0, 0, 0, 1, 1, 2]


@pytest.mark.parametrize("block", [16, 64])
def test_the_bound_of_document_prompts_by_segments_equals_the_per_block_count(block):
    """shared_documents prompts (a document's chain, then blocks of their own; zero-token
    suffixes, repeated documents) counted per segment of a chain give the per-block counts
    exactly; ids that do not start with a document chain (a trace's; a document shorter than a
    block) are counted per block."""
    from kvsim.rng import RandomStreams
    from kvsim.workload.lengths import UniformLength
    from kvsim.workload.reuse import DocumentLibrary, SharedDocuments

    rng = np.random.default_rng(block)
    spec = SharedDocuments(documents=12, zipf_s=1.0,
                           document_tokens=UniformLength(low=block, high=40 * block),
                           suffix_tokens=UniformLength(low=1, high=3 * block))
    library = DocumentLibrary(spec, block, RandomStreams(block).generator("docs"))
    prompts = []
    for i, (d, suffix) in enumerate(zip(library.choose(rng, 400).tolist(), rng.integers(0, 3 * block, 400).tolist())):
        _, ids = library.prompt(d, suffix, ("bound", block, i))
        prompts.append(ids)
    prompts[7] = None
    per_block = infinite_cache_hit_blocks(prompts)
    assert per_block.sum() > 0
    assert infinite_cache_hit_blocks(prompts, block_tokens=block).tolist() == per_block.tolist()
    assert _hits_by_segments(prompts, prompts, block) is not None  # (counted by segments, not per block)
    # documents shorter than a block: such a prompt is a chain of its own (told it is one of
    # shared documents), or per block (not told)
    short = DocumentLibrary(spec.model_copy(update={"document_tokens": UniformLength(low=1, high=3 * block)}),
                            block, RandomStreams(block + 1).generator("docs"))
    prompts = [short.prompt(d, suffix, ("short", block, i))[1]
               for i, (d, suffix) in enumerate(zip(short.choose(rng, 300).tolist(),
                                                   rng.integers(1, 3 * block, 300).tolist()))]
    per_block = infinite_cache_hit_blocks(prompts)
    assert min(len(short.prompt(d, 1, ("x",))[1]) for d in range(12)) >= 1 and per_block.sum() > 0
    assert _hits_by_segments(prompts, prompts, block) is None
    assert _hits_by_segments(prompts, prompts, block, documents=True).tolist() == per_block.tolist()
    # a trace's ids (no document chain) fall back to the per-block count
    foreign = [np.array([1, 2, 3]), np.array([1, 2, 4])]
    assert infinite_cache_hit_blocks(foreign, block_tokens=block).tolist() == [0, 2]


@needs_trace
def test_the_closed_form_bound_equals_a_replay_of_the_mooncake_trace():
    rows = [json.loads(line) for line in TRACE.read_text().splitlines()]
    hashes = [r["hash_ids"] for r in rows]
    inputs = np.array([r["input_length"] for r in rows])
    closed = infinite_cache_hit_blocks(hashes)
    index, store = KVIndex(), BlockStore("all", 1e6, 1.0)
    replay = []
    for ids in hashes:
        replay.append(index.longest_prefix(ids))
        for block in ids:
            index.insert(store, block)
    assert closed.tolist() == replay
    # the trace README's definition (tokens = min(blocks x 512, input)) gives its 37.4 %
    assert 100 * np.minimum(closed * 512, inputs).sum() / inputs.sum() == pytest.approx(37.4, abs=0.05)
    # under kvsim's rule (whole blocks, the last prompt block computed) it is barely lower
    whole = np.minimum(closed, cacheable_blocks(inputs, 512)) * 512
    assert 37.2 < 100 * whole.sum() / inputs.sum() < 37.4


# ---------------------------------------------------------------------------------------------
# the Mooncake conversation trace on 128 instances
# ---------------------------------------------------------------------------------------------

SLICE_REQUESTS = 2000   # the first 2,000 requests: 669 s of the trace's 59 minutes
SLICE_OUTPUT_CAP = 32   # outputs capped to keep the test fast; prompts and hashes are the trace's


@pytest.fixture(scope="module")
def mooncake_slice(tmp_path_factory):
    """The trace's first requests with outputs capped, as a trace file, and its rows."""
    rows = [json.loads(line) for line in TRACE.read_text().splitlines()[:SLICE_REQUESTS]]
    path = tmp_path_factory.mktemp("trace") / "slice.jsonl"
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps({**row, "output_length": min(row["output_length"], SLICE_OUTPUT_CAP)}) + "\n")
    return path, rows


@needs_trace
def test_cache_aware_routing_reaches_the_infinite_cache_bound_on_128_instances(mooncake_slice):
    import kvsim

    path, rows = mooncake_slice
    # 16 servers x 8 H20 = 128 instances of Qwen3-8B, each server with 512 GiB of host DRAM for
    # KV (written through after prefill): about 7,000 blocks of 512 tokens per server
    system = "{node: h20-8x, nodes: 16, kv_cache: {dram: {capacity: 512 GiB}}, router: %s}"
    text = f"""
name: mooncake-routing
seed: 1
duration: 700 s
model: qwen3-8b
workload:
  arrival: {{kind: trace, format: mooncake, file: {path}}}
systems:
  least_outstanding: {system % "least_outstanding"}
  cache_aware: {system % "cache_aware"}
"""
    result = kvsim.run(kvsim.parse_scenario(text, "mooncake.yaml"))
    lo, ca = (result.run(s).summary["routing"] for s in ("least_outstanding", "cache_aware"))
    inputs = np.array([r["input_length"] for r in rows])
    hits = np.minimum(infinite_cache_hit_blocks([r["hash_ids"] for r in rows]), cacheable_blocks(inputs, 512))
    bound = (hits * 512).sum() / inputs.sum()
    assert result.run("cache_aware").records.n == SLICE_REQUESTS
    assert ca["token_hit_rate_infinite_cache"] == lo["token_hit_rate_infinite_cache"] == pytest.approx(bound)
    assert 0.28 < bound < 0.30  # the slice starts cold: its bound is below the whole trace's 37.4 %
    # the target: within 5 points of the infinite cache
    assert ca["token_hit_rate"] <= bound + 1e-12 and ca["token_hit_rate_gap"] < 0.05
    # without starving or piling onto any instance: every one of the 128 serves requests, and
    # none more than 1.5 x the mean (SGLang's imbalance ratio, balance_rel_threshold)
    assert ca["instances"] == 128
    assert ca["requests_per_instance"]["min_over_mean"] > 0
    assert ca["requests_per_instance"]["max_over_mean"] < 1.5
    # least-outstanding scatters each conversation over the cluster: the issue measured 14.6 % of
    # 37.4 % (0.39 of the bound) on the whole trace
    assert lo["token_hit_rate"] < 0.6 * bound
    assert ca["token_hit_rate"] > lo["token_hit_rate"] + 0.10
