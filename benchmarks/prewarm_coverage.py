"""How warm a cache prewarm leaves the tiers below HBM, and what it costs (issue 24; not a test).

For each scenario given (``scenarios/<stem>.yaml``, or ``repro``: many nearly equally popular
documents and a remote pool that never fills), for each distinct document set among its sweep
points and each distinct (node, model, lower tiers) of its systems with ``kv_cache.prewarm``
(the first point of each): builds the system as a run does (``build_system``,
which prewarms it) and reports the prompts the prewarm used, its CPU seconds
(``time.process_time``, noisy on a shared machine), the blocks stored per tier, and the
coverage: over 2,000 probe prompts drawn independently from the same workload (streams
``probe.*``), the share of their document blocks found in the
first lower tier a block would be looked up in (a node's DRAM or NVMe tier, else its pool node).
Run it against another checkout with ``PYTHONPATH=<checkout>`` to compare.

    .venv/bin/python benchmarks/prewarm_coverage.py repro offload_gap [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import simpy

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import kvsim  # noqa: E402
from kvsim.metrics.records import RequestRecords  # noqa: E402
from kvsim.rng import DerivedStreams, RandomStreams  # noqa: E402
from kvsim.serving.cache.tiers import SystemCache  # noqa: E402
from kvsim.sim import check_scenario  # noqa: E402
from kvsim.sim.build import build_system  # noqa: E402
from kvsim.workload import ClientStream, open_loop_requests  # noqa: E402

REPRO = """
name: prewarm-repro
seed: 24
duration: 60 s
model: qwen3-8b
workload:
  arrival: {kind: closed_loop, clients: 16}
  prefix: {kind: shared_documents, documents: 16000, zipf_s: 0.1, document_tokens: {kind: fixed, value: 2048},
           suffix_tokens: {kind: fixed, value: 512}}
  output_tokens: {kind: fixed, value: 1}
  block_tokens: 256
systems:
  pool: {node: h20-8x, instances: 1, kv_cache: {remote: {pool_node: nvme-storage-16x, nodes: 1}, prewarm: true}}
"""
PROBES = 2000


def _probe(cache: SystemCache, workload, streams: RandomStreams, block_tokens: int) -> float:
    """Share of the probe prompts' document blocks present in the first lower store looked up."""
    derived = DerivedStreams(streams, "probe", shared=("workload.prefix.document_tokens",))
    if workload.closed_loop:
        clients = [ClientStream(workload, c, derived, namespace="probe") for c in range(workload.arrival.clients)]
        requests = (clients[k % len(clients)].next_request_with_hashes() for k in range(PROBES))
        prompts = [r.hash_ids[: r.shared_tokens // block_tokens] for r in requests]
    else:  # open loop: documents of one fixed length only (the shipped scenarios')
        drawn = open_loop_requests(workload, PROBES / workload.arrival.rate, derived, namespace="probe")
        doc = int(workload.prefix.document_tokens.value) // block_tokens
        prompts = [hashes[:doc] for hashes in drawn.hash_ids]
    locals_ = list(cache.dram.values()) + list(cache.nvme.values())
    found = total = 0
    for shared in prompts:
        for block in shared:
            store = locals_[0] if locals_ else cache.remote_store(block)
            found += block in store
        total += len(shared)
    return found / total if total else float("nan")


def measure(name: str, scenario: kvsim.Scenario) -> list[dict]:
    rows = []
    seen = set()
    sizings = check_scenario(scenario)
    used: list[int] = []
    original = SystemCache.prewarm

    def counted(self, prompts, *args, **kwargs):
        n = original(self, prompts, *args, **kwargs)
        used.append(n)
        return n

    SystemCache.prewarm = counted
    try:
        for point in scenario.points:
            spec = point.spec
            prefix = spec.workload.prefix.model_dump_json()
            for system, sys_spec in spec.systems.items():
                cache = sys_spec.kv_cache
                if cache is None or not cache.prewarm:
                    continue
                # one run per document set, tiers, node and model: the clients and the transfer
                # path do not change what the prewarm stores
                key = (prefix, sys_spec.node, sys_spec.model, str(cache.dram), str(cache.nvme), str(cache.remote))
                if key in seen:
                    continue
                seen.add(key)
                sizing = sizings[(point.index, system)]
                streams = RandomStreams(spec.seed)
                block = spec.workload.block_tokens
                used.clear()
                t0 = time.process_time()
                built = build_system(simpy.Environment(), spec, sizing, RequestRecords(16), streams, block)
                cpu_s = time.process_time() - t0
                tiers = built.cache
                stored = {"dram": sum(len(s) for s in tiers.dram.values()),
                          "nvme": sum(len(s) for s in tiers.nvme.values()),
                          "pool": sum(len(s) for s in tiers.remote)}
                capacity = {"dram": sum(s.capacity_blocks for s in tiers.dram.values()),
                            "nvme": sum(s.capacity_blocks for s in tiers.nvme.values()),
                            "pool": sum(s.capacity_blocks for s in tiers.remote)}
                coverage = _probe(tiers, spec.workload, RandomStreams(spec.seed), block)
                rows.append({"scenario": name, "point": point.index,
                             "params": {k: str(v) for k, v in point.params.items()}, "system": system,
                             "prompts": used[0] if used else None, "build_cpu_s": round(cpu_s, 2),
                             "stored": {k: v for k, v in stored.items() if capacity[k]},
                             "capacity": {k: v for k, v in capacity.items() if v},
                             "coverage": round(coverage, 4)})
                r = rows[-1]
                print(f"{name:20} pt {point.index:2} {system:16} prompts {r['prompts']!s:>7} "
                      f"build {cpu_s:6.2f} CPU-s  stored {r['stored']}  coverage {coverage:.4f}", flush=True)
    finally:
        SystemCache.prewarm = original
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="+", help="scenario stems, or 'repro'")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    rows = []
    for stem in args.scenarios:
        if stem == "repro":
            scenario = kvsim.parse_scenario(REPRO, "repro.yaml")
        else:
            scenario = kvsim.load_scenario(ROOT / "scenarios" / f"{stem}.yaml")
        rows += measure(stem, scenario)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
