"""Cost of the cache-aware router's prefix lookup: one walk of the prompt's blocks against one scan
per instance, on the Mooncake conversation trace and a 128-instance cluster index.

Run on demand (not part of the test suite), from the repository root:

    .venv/bin/python benchmarks/bench_routing.py [--instances 128] [--per-node 8] [--warm 6000]

The index is filled by replaying the trace's first ``--warm`` requests, each on an instance chosen
by its conversation (the hash of its second block), into that instance's HBM and its node's DRAM;
then each of the next requests is looked up for every instance, both ways, and the answers are
checked equal. Prints microseconds per arrival.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from kvsim.kv import BlockStore, KVIndex
from kvsim.serving.prefix_reach import CacheLayout, reach

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
CREDIT = {"hbm": 1.0, "dram": 0.75}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=128)
    parser.add_argument("--per-node", type=int, default=8)
    parser.add_argument("--warm", type=int, default=6000)
    parser.add_argument("--lookups", type=int, default=2000)
    args = parser.parse_args()
    rows = [json.loads(line)["hash_ids"] for line in TRACE.read_text().splitlines()]
    index = KVIndex()
    nodes = [f"node{k // args.per_node}" for k in range(args.instances)]
    hbm = [BlockStore(f"i{k}.hbm", 1e9, 1.0) for k in range(args.instances)]
    dram = {node: BlockStore(f"{node}.dram", 1e9, 1.0) for node in dict.fromkeys(nodes)}
    tier = {id(s): "hbm" for s in hbm} | {id(s): "dram" for s in dram.values()}
    for ids in rows[:args.warm]:
        k = hash(ids[1] if len(ids) > 1 else ids[0]) % args.instances
        for block in ids:
            index.insert(hbm[k], block)
            index.insert(dram[nodes[k]], block)
    layout = CacheLayout(hbm=hbm, nodes=nodes, node_stores={n: [(s, 1, CREDIT["dram"])] for n, s in dram.items()},
                         remote=[], hbm_credit=CREDIT["hbm"], remote_credit=0.5)
    queries = rows[args.warm:args.warm + args.lookups]

    started = time.perf_counter()
    walked = [reach(ids, len(ids) - 1, index.locations, layout) for ids in queries]
    walk_s = time.perf_counter() - started

    def scan(ids):
        blocks, credit = [], []
        for k in range(args.instances):
            mine = {id(hbm[k]), id(dram[nodes[k]])}

            def usable(store, mine=mine):
                return id(store) in mine

            depth = index.longest_prefix(ids[:len(ids) - 1], usable)
            sources = index.tier_breakdown(ids, depth, lambda s: 0 if tier[id(s)] == "hbm" else 1, usable)
            blocks.append(depth)
            credit.append(sum(CREDIT[tier[id(s)]] for s in sources))
        return blocks, credit

    started = time.perf_counter()
    scanned = [scan(ids) for ids in queries]
    scan_s = time.perf_counter() - started
    same = all(w[0] == s[0] and all(abs(a - b) < 1e-9 for a, b in zip(w[1], s[1])) for w, s in zip(walked, scanned))
    blocks = sum(len(ids) for ids in queries) / len(queries)
    print(f"{args.instances} instances ({len(dram)} nodes), index of {len(index):,} blocks; "
          f"{len(queries)} prompts of {blocks:.1f} blocks on average")
    print(f"  one walk:          {1e6 * walk_s / len(queries):8.1f} us per arrival")
    print(f"  scan per instance: {1e6 * scan_s / len(queries):8.1f} us per arrival")
    print(f"  same answers: {same}")


if __name__ == "__main__":
    main()
