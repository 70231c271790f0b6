"""The MoE expert offload and pool-home figures of docs/how-to/study-weight-offload.md, from the model.

    .venv/bin/python benchmarks/moe_offload_table.py [--model qwen3-235b-a22b] [--node h20-8x] [--tp 8]
        [--dtype fp8] [--fraction 0.25] [--pool-node dram-pool-8x] [--pool-nodes 2] [--streaming-cards 16]

Prints, for uniform routing and Zipf skews 0.5 and 1: the HBM freed per card and the host DRAM
taken; the expected cold experts a layer touches and its transfer at 1 to 2,048 tokens; a decode
step's time (4K context) at 16 and 128 sequences with every weight in HBM, with the cold experts on
the host, and in the pool (:mod:`kvsim.models.weight_offload`). Closed-form arithmetic, no run.
"""

from __future__ import annotations

import argparse

from kvsim.hardware import accelerator_catalog, node_catalog, pool_node_catalog
from kvsim.models import model_catalog
from kvsim.models.parallel import Layout
from kvsim.models.step_time import BatchShape, RooflineStepTime
from kvsim.models.weight_offload import PoolHome, WeightOffloadSpec, offload_sizing, pool_stream_Bps, touched_experts

TOKENS = (1, 16, 64, 256, 2048)
SEQS = (16, 128)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-235b-a22b")
    parser.add_argument("--node", default="h20-8x")
    parser.add_argument("--tp", type=int, default=8)
    parser.add_argument("--dtype", default="fp8")
    parser.add_argument("--fraction", type=float, default=0.25)
    parser.add_argument("--pool-node", default="dram-pool-8x")
    parser.add_argument("--pool-nodes", type=int, default=2)
    parser.add_argument("--streaming-cards", type=int, default=16)
    args = parser.parse_args(argv)
    model, node = model_catalog()[args.model], node_catalog()[args.node]
    card = accelerator_catalog()[node.accelerator]
    layout = Layout(tp=args.tp)
    home = PoolHome(pool_node_catalog()[args.pool_node], args.pool_nodes, args.streaming_cards)
    plain = RooflineStepTime(model, card, args.tp, args.dtype, args.dtype)
    batches = {s: BatchShape(decode_seqs=s, decode_context_tokens=s * 4096, sampled_seqs=s) for s in SEQS}
    print(f"{model.name} {args.dtype} on {node.name} tp {args.tp}, fraction {args.fraction:g} of the routed experts")
    print(f"host rate {card.host_link_bandwidth * card.efficiency.host_copy / 1e9:.2f} GB/s a card; pool rate "
          f"{pool_stream_Bps(node, card, home) / 1e9:.2f} GB/s ({args.pool_nodes} x {args.pool_node}, "
          f"{args.streaming_cards} cards streaming)")
    print("| skew | HBM freed GB/card | host DRAM GB | " + " | ".join(f"touched @{t}" for t in TOKENS)
          + " | " + " | ".join(f"decode {s} ms (HBM / host / pool)" for s in SEQS) + " |")
    print("|---" * (3 + len(TOKENS) + len(SEQS)) + "|")
    for skew in (0.0, 0.5, 1.0):
        host = offload_sizing(WeightOffloadSpec(fraction=args.fraction), model, node, card, layout, args.dtype, None,
                              expert_skew=skew)
        pool = offload_sizing(WeightOffloadSpec(fraction=args.fraction, home="pool"), model, node, card, layout,
                              args.dtype, None, expert_skew=skew, pool=home)
        steps = [RooflineStepTime(model, card, args.tp, args.dtype, args.dtype, stream=s.stream) for s in (host, pool)]
        touched = [f"{touched_experts(host.stream.cold_shares, t):.2f}" for t in TOKENS]
        decode = [" / ".join(f"{m.breakdown(batches[s]).total_s * 1e3:.1f}" for m in [plain, *steps]) for s in SEQS]
        host_gb = host.offloaded_bytes_per_card * node.accelerators_per_node / 1e9
        print(f"| {skew:g} | {host.freed_bytes_per_card / 1e9:.2f} | {host_gb:.1f} | " + " | ".join(touched) + " | "
              + " | ".join(decode) + " |")


if __name__ == "__main__":
    main()
