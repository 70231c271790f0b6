"""The scenarios the fuzzer mutates (tests/test_fuzz.py): every shipped scenario, plus small
crafted ones that reach what the shipped ones do not (trace files, length files, catalog
sweeps, studies, ``--set``), each with the side files it names.

A base is text plus side files (name -> bytes) written beside it in the case's folder, so
file-level mutations can break a trace or a length file the scenario refers to. Relative paths
in shipped scenarios are made absolute, as the case runs from another folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = REPO / "scenarios"


@dataclass(frozen=True)
class Base:
    name: str
    text: str
    files: dict[str, bytes] = field(default_factory=dict)
    runnable: bool = True
    """Whether a valid mutant is also run (capped to CAP_S simulated seconds): false where even that
    takes many wall seconds (prewarmed pools, pilot runs of every layout)."""


SMALL = """\
name: small
seed: 1
duration: 20 s
warmup: 5 s
model: qwen3-8b
dtype: bf16
workload:
  arrival:
    kind: poisson
    rate: 2/s
  input_tokens:
    kind: fixed
    value: 128
  output_tokens:
    kind: lognormal
    median: 32
    sigma: 0.5
    max: 256
slo:
  ttft_p99: 2 s
  tpot_p99: 100 ms
systems:
  h20:
    node: h20-8x
    nodes: 1
    instances: 2
    instance:
      tp: 1
      max_num_seqs: 64
    kv_cache:
      dram:
        capacity: 64 GiB
  l20:
    node: l20-8x
    instances: 1
    instance:
      tp: 2
compare:
  baseline: l20
"""

TRACE = """\
name: trace-replay
seed: 3
duration: 30 s
warmup: 0 s
model: qwen3-1.7b
workload:
  arrival: {kind: trace, format: mooncake, file: trace.jsonl, time_scale: 1.0}
systems:
  a: {node: h20-8x, instances: 1, instance: {tp: 1}, kv_cache: {}}
"""

TRACE_ROWS = "".join(  # one hash id per started 512-token block, the first block shared
    f'{{"timestamp": {t * 250}, "input_length": {300 + 97 * t}, "output_length": {5 + t % 4}, '
    f'"hash_ids": [{", ".join(str(0 if b == 0 else 100 * t + b) for b in range(-(-(300 + 97 * t) // 512)))}]}}\n'
    for t in range(24)).encode()

CSV_TRACE = """\
name: csv-trace
seed: 4
duration: 20 s
model: qwen3-8b
workload:
  arrival: {kind: trace, format: azure_2023, file: azure.csv}
systems:
  a: {node: l20-8x, instances: 2, instance: {tp: 1}}
"""

CSV_ROWS = ("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
    f"2023-11-16 18:15:{t:02d}.000000,{100 + 13 * t},{10 + t}\n" for t in range(30))).encode()

LENGTHS = """\
name: length-files
seed: 5
duration: 15 s
warmup: 1 s
model: qwen3-8b
workload:
  arrival: {kind: gamma, rate: 3/s, cv: 2}
  input_tokens: {kind: empirical, file: prompts.csv, column: tokens}
  output_tokens: {kind: empirical, file: outputs.txt}
systems:
  a: {node: h20-8x, instances: 1, instance: {tp: 1}}
sweep:
  workload.arrival.rate: [1/s, 4/s]
"""

CATALOG = """\
name: catalog-sweep
seed: 6
duration: 10 s
model: tiny
workload:
  arrival: {kind: closed_loop, clients: 4}
  input_tokens: {kind: uniform, low: 64, high: 512}
  output_tokens: {kind: fixed, value: 16}
catalog:
  models:
    tiny: {base: qwen3-1.7b, num_layers: 12}
  nodes:
    slow-h20: {base: h20-8x, nics: {count: 1, bandwidth: 100 Gbit/s}}
systems:
  fast: {node: h20-8x, instance: {tp: 1}}
  slow: {node: slow-h20, instance: {tp: 1}, kv_cache: {}}
sweep:
  catalog.nodes.slow-h20.nics.bandwidth: [100 Gbit/s, 400 Gbit/s]
  workload.arrival.clients: [2, 8]
"""

PD = """\
name: pd-small
seed: 8
duration: 20 s
warmup: 2 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 4/s}
  input_tokens: {kind: fixed, value: 1024}
  output_tokens: {kind: fixed, value: 64}
slo: {ttft_p99: 2 s, tpot_p99: 100 ms}
systems:
  colocated: {node: h20-8x, instances: 4, instance: {tp: 1}}
  split:
    pools:
      dt: {node: h20-8x, nodes: 1, instance: {tp: 2}, roles: {prefill: 2, decode: 2}}
    controller: {kind: threshold, signal: prefill_queue, interval: 5 s, low: 100, high: 10000}
compare: {baseline: colocated}
study: {kind: pd, x: workload.arrival.rate, timeline: [split]}
sweep:
  workload.arrival.rate: [2/s, 6/s]
"""

CONTROLLERS = """\
name: controllers
seed: 12
duration: 20 s
warmup: 2 s
model: qwen3-1.7b
workload:
  arrival: {kind: poisson, rate: 6/s}
  input_tokens: {kind: uniform, low: 200, high: 1200}
  output_tokens: {kind: fixed, value: 32}
slo: {ttft_p99: 1 s, tpot_p99: 50 ms}
systems:
  prop:
    pools:
      p: {node: h20-8x, instance: {tp: 1}, instances: 6, roles: {prefill: 3, decode: 3}}
    controller: {kind: proportional, signal: ttft_attainment, setpoint: 0.9, gain: 4, max_step: 2,
                 interval: 2 s, window: 4 s, min_prefill: 1, min_decode: 2, switch_time: 1 s}
  band:
    pools:
      p: {node: h20-8x, instance: {tp: 1}, instances: 4, roles: {prefill: 2, decode: 2}}
    controller: {kind: threshold, signal: decode_kv_occupancy, low: 0.2, high: 0.8, step: 1, interval: 3 s}
  fixed:
    pools:
      pre: {node: h20-8x, instance: {tp: 2}, instances: 1, role: prefill}
      dec: {node: h20-8x, instance: {tp: 1}, instances: 2, role: decode}
    controller: {kind: static, interval: 5 s}
"""

MODEL_OVERRIDES = """\
name: model-overrides
seed: 13
duration: 10 s
warmup: 1 s
model: moe-small
workload:
  arrival: {kind: poisson, rate: 3/s}
  input_tokens: {kind: fixed, value: 256}
  output_tokens: {kind: fixed, value: 16}
catalog:
  models:
    moe-small:
      base: qwen3-235b-a22b
      num_layers: 8
      moe: {num_experts: 32, experts_per_token: 4, expert_intermediate_size: 768, first_dense_layers: 1,
            shared_experts: 1}
    slim-dense: {base: qwen3-8b, num_layers: 12, num_kv_heads: 4, hidden_size: 2048}
systems:
  moe:
    node: h20-8x
    instances: 1
    instance: {tp: 2, ep: 2}
  dense: {node: l20-8x, model: slim-dense, instances: 2, instance: {tp: 1}}
"""

DOMAINS = """\
name: domains-small
seed: 14
duration: 10 s
warmup: 1 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 4/s}
  output_tokens: {kind: fixed, value: 16}
  prefix:
    kind: shared_documents
    documents: 8
    zipf_s: 1.0
    document_tokens: {kind: fixed, value: 768}
    suffix_tokens: {kind: fixed, value: 256}
systems:
  shared:
    node: h20-8x
    nodes: 2
    scale_up_domain_nodes: 2
    instance: {tp: 2}
    kv_cache: {peer_hbm: read_in_place, dram: {capacity: 64 GiB}}
  layered:
    node: h20-8x
    nodes: 2
    instance: {tp: 4, pp: 2}
    kv_cache: {}
"""


def crafted() -> list[Base]:
    return [
        Base("small", SMALL),
        Base("trace", TRACE, {"trace.jsonl": TRACE_ROWS}),
        Base("csv_trace", CSV_TRACE, {"azure.csv": CSV_ROWS}),
        Base("lengths", LENGTHS, {"prompts.csv": b"id,tokens\n" + b"".join(b"%d,%d\n" % (i, 50 + 9 * i)
                                                                           for i in range(20)),
                                  "outputs.txt": b" ".join(b"%d" % (3 + i) for i in range(40)) + b"\n"}),
        Base("catalog", CATALOG),
        Base("pd", PD),
        Base("controllers", CONTROLLERS),
        Base("model_overrides", MODEL_OVERRIDES),
        Base("domains", DOMAINS),
    ]


SLOW_TO_RUN = {"offload_gap.yaml", "offload_gap_layouts.yaml", "offload_gap_decode.yaml", "domains_128.yaml",
               "pd_ratio.yaml", "pd_ratio_nvidia.yaml", "routing_mooncake.yaml", "odcc_kv_pool.yaml"}
"""Validated only: a capped run of these takes 1-100 wall seconds (pd_ratio_nvidia: pilots of every layout
of each pool; the crafted bases cover their features)."""


def shipped() -> list[Base]:
    bases = []
    for path in sorted(SCENARIOS.glob("*.yaml")):
        text = path.read_text(encoding="utf-8").replace("../../shared/", str(REPO.parent / "shared") + "/")
        bases.append(Base(path.stem, text, runnable=path.name not in SLOW_TO_RUN))
    return bases


def all_bases() -> list[Base]:
    return crafted() + shipped()
