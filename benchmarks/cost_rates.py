"""Measure the per-path CPU rates of kvsim's run-cost model (kvsim/plan/cost_rates.py).

Run on demand (not part of the test suite), from the repository root, with nothing else heavy
beside it:

    .venv/bin/python benchmarks/cost_rates.py [--backend compiled] [--scale 0.1] [--capacity 3.55]
        [--repeat 3] [--json results/cost_rates.json] [--out docs/run_cost.md] [--write-rates]

``--backend`` (``python`` or ``compiled``; default: the one ``engine.backend: auto`` runs here,
i.e. ``KVSIM_BACKEND`` if set) is the engine every case runs on: each backend has its own rates
(``RATES[backend]`` in ``kvsim/plan/cost_rates.py``).

Each case isolates paths of the model (kvsim/plan/cost_model.py): the speed cases of
``speed_cases.py`` -- ladder-8/64/256 (requests, batch, iterations, instances; no cache),
offload-nocache and offload-dram_nvme (the same requests without and with DRAM + NVMe tiers:
tier blocks and transfers), mooncake (HBM + DRAM cache on a trace; again as
``mooncake-cache_aware``, routed by cache: every instance scored per request), domains (its
three systems: per-block work across addressing domains; again as ``domains-local``, its 8-card
servers with each instance's own HBM cache: the same blocks without domain lookups; and as
``domains-nocache``, those servers without a cache: its documents' blocks hashed, which move
with its requests through the cache in the other domains cases), pd (handoffs; also as
``pd-tp4``, two servers of tp-4 instances, for the handoff's flows per card) -- at ``--scale``
of their durations, ladder-64 again at 3x that scale, the ladder's saturation probe (a closed
loop) and ``scenarios/plan_offload.yaml``'s H20 (``plain``: each instance's own HBM kept as
extents, no lower tier, at 8/s: most requests miss; ``plain-hot``, the same with one document:
most requests hit), its one-node pool systems (a cache prewarm; remote-pool
transfers), its DRAM-tier system (``dram``; and ``dram-hot``, with one document at 8/s: its requests
find it in HBM, so the lower tier's work per request is told from its loads) and its L20 with DRAM and NVMe (``tiers``: two lower
stores a prompt where the others have one) -- all kept as extents since phase 6
(docs/extents.md), so they set the extent paths below HBM (``extent_tier``, ``extent_prewarm``)
and the per-block ones (``tier_block``, ``prewarm_block``) are set by the offload, mooncake,
gap-remote and quick-pool cases --, one probe of the planning question of docs/planning.md
(16-token blocks, one shared document) on its DRAM candidate (``quick-dram``: kept as extents,
four nodes' DRAM prewarmed) and its pool candidate (``quick-pool``: four pool nodes, per block),
``domains@3``
(domains three times as long: more of its prompts hit, so computed blocks and looked-up ones are
told apart), ``lora`` (``scenarios/lora_shared_context.yaml`` at 16K-token documents and 32
clients: full caches, per-adapter KV, value reuse's lookups; ``lora-refused``, its value-reuse
system at 24K-token documents and 48 clients, whose copies overflow the KV, so the queue's head
is refused and scans its keys again at every step) and ``gap-remote``
(``scenarios/offload_gap.yaml``'s pool over RDMA and GPU-Direct at 8K tokens: 8 cards x 4 pool
nodes of flows per transfer, 32 blocks per prewarm prompt). Every system of a case is run alone, in this process, ``--repeat``
times (the least CPU time kept: on a shared machine the others carry noise); its path counts are
the model's estimate for that run (so the rates fit what the model will be given, not counts
the model cannot know before a run). The rates are the non-negative least-squares fit of

    measured CPU-s = sum(count[path] * rate[path])

weighted by 1 / measured CPU-s (every case counts by its relative error, not its size), with a
small ridge (``--ridge``) so that paths whose counts move together share their cost. The
script prints each case's measured and fitted CPU-s and the rates as Python to paste into
``kvsim/plan/cost_rates.py`` under that backend's name.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import kvsim  # noqa: E402
from kvsim.plan.cost_rates import PATHS  # noqa: E402
from kvsim.plan.run_cost import point_cost, point_requests, workload_shape  # noqa: E402
from kvsim.scenario.load import ScenarioPoint  # noqa: E402
from kvsim.sim.run import run_point  # noqa: E402
from kvsim.workload.reuse import forget_document_chains  # noqa: E402
from speed_measure import machine  # noqa: E402

CASES = ("ladder-8", "ladder-64", "ladder-256", "ladder-64@3", "offload-nocache", "offload-dram_nvme", "mooncake",
         "mooncake-cache_aware", "domains", "domains-local", "domains-nocache", "domains@3", "pd", "pd-tp4", "probe",
         "plain", "plain-hot", "prewarm", "remote", "dram", "dram-hot", "tiers", "quick-dram", "quick-pool", "lora",
         "lora-refused", "gap-remote")
"""The cases fitted, in order; ``CASE@k`` runs ``CASE`` at ``k`` times ``--scale`` (a longer run of
the same system separates the per-run costs from the per-request ones)."""


def case_scenario(case: str, scale: float, capacity: float) -> kvsim.Scenario:
    """The scenario of ``case``: a speed case; ``plain``, ``scenarios/plan_offload.yaml``'s H20 at 8/s;
    ``prewarm``, its L20
    with a remote pool (prewarmed) at 1/s, where the prewarm is most of the run; ``remote``, its
    H20 with the same pool at 8/s, where the requests' remote-pool transfers are; ``dram``, its L20
    with a 512 GiB DRAM tier (prewarmed) at 4/s."""
    from speed_cases import scenario_for

    if "@" in case:
        case, factor = case.split("@")
        scale *= float(factor)
    if case == "mooncake-cache_aware":  # the mooncake case routed by cache: every instance scored per request
        return scenario_for("mooncake", {"scale": scale}).with_changes({"systems.h20x16.router": "cache_aware"})
    if case == "domains-local":  # domains' 8-card servers, each instance its own HBM cache: no domain lookups
        domains = scenario_for("domains", {"scale": scale})
        local = {**domains.raw["systems"]["servers_16x8"], "kv_cache": {"peer_hbm": "none"}}
        return domains.with_changes({"systems": {"servers_16x8_local": local}})
    if case == "domains-nocache":  # its servers without a cache: the documents hashed, no cache path
        domains = scenario_for("domains", {"scale": scale})
        bare = {k: v for k, v in domains.raw["systems"]["servers_16x8"].items() if k != "kv_cache"}
        return domains.with_changes({"systems": {"servers_16x8_nocache": {**bare, "router": "round_robin"}}})
    if case == "pd-tp4":  # the pd case on two servers of tp-4 instances: 4 flows per handoff
        pool = "systems.pd.pools.h20"
        return scenario_for("pd", {"scale": scale}).with_changes(
            {f"{pool}.nodes": 2, f"{pool}.instance.tp": 4, f"{pool}.roles": {"prefill": 2, "decode": 2}})
    if case == "lora":  # lora_shared_context at 16K-token documents and 32 clients: value reuse, full caches
        lora = kvsim.load_scenario(HERE.parent / "scenarios" / "lora_shared_context.yaml")
        return lora.with_changes({"sweep": {}, "study": None, "workload.prefix.document_tokens.value": 16384,
                                  "workload.arrival.clients": 32, "duration": 180 * scale, "warmup": 60 * scale})
    if case == "lora-refused":  # its value_reuse system at 24K tokens and 48 clients: the KV overflows
        lora = case_scenario("lora", scale, capacity)
        return lora.with_changes({"systems": {"value_reuse": lora.raw["systems"]["value_reuse"]},
                                  "workload.prefix.document_tokens.value": 24576, "workload.arrival.clients": 48})
    if case == "gap-remote":  # offload_gap's pool over RDMA and GPU-Direct at 8K tokens, 16 clients
        gap = kvsim.load_scenario(HERE.parent / "scenarios" / "offload_gap.yaml")
        keep = {name: gap.raw["systems"][name] for name in ("l20-rdma", "h20-gdr")}
        return gap.with_changes({"sweep": {}, "study": None, "compare": None, "systems": keep,
                                 "workload.prefix.document_tokens.value": 7680,
                                 "workload.prefix.suffix_tokens.low": 256, "workload.prefix.suffix_tokens.high": 768,
                                 "workload.arrival.clients": 16, "duration": 1400 * scale, "warmup": 400 * scale})
    if case in ("quick-dram", "quick-pool"):
        return quick_probe(case, scale)
    if case in ("plain-hot", "dram-hot"):  # one document at 8/s: the requests find it in HBM (no loads from below)
        return case_scenario(case[:-4], scale, capacity).with_changes(
            {"workload.prefix.documents": 1, "workload.arrival.rate": "8/s"})
    if case == "tiers":  # plan_offload's L20 with DRAM and the node's NVMe, both prewarmed, at 4/s
        plan = kvsim.load_scenario(HERE.parent / "scenarios" / "plan_offload.yaml")
        kv = {"dram": {"capacity": "512 GiB"}, "nvme": {}, "prewarm": True}
        return plan.with_changes({"systems": {"l20-dram_nvme": {**plan.raw["systems"]["l20"], "kv_cache": kv}},
                                  "plan": None, "workload.arrival.rate": "4/s", "duration": 240 * scale,
                                  "warmup": 60 * scale})
    if case in ("plain", "plain-hot", "prewarm", "remote", "dram"):
        name, rate = {"plain": ("h20", "8/s"), "prewarm": ("l20-pool", "1/s"), "remote": ("h20-pool", "8/s"),
                      "dram": ("l20-dram", "4/s")}[case]
        plan = kvsim.load_scenario(HERE.parent / "scenarios" / "plan_offload.yaml")
        return plan.with_changes({"systems": {name: plan.raw["systems"][name]}, "plan": None,
                                  "workload.arrival.rate": rate, "duration": 240 * scale, "warmup": 60 * scale})
    return scenario_for(case, {"scale": scale, "capacity_per_s": capacity})


QUICK = "h20-8x,l20-8x,l20-8x+dram=512GiB,l20-8x+pool=nvme-storage-16x"
"""The candidates of the planning question of docs/planning.md (quick mode)."""


def quick_probe(case: str, scale: float) -> kvsim.Scenario:
    """One probe of the planning question of docs/planning.md (``kvsim plan --model qwen3-8b
    --target 40/s --prompt-tokens 8192 --shared-prefix-tokens 7168 --output-tokens 200``, its
    blocks of 16 tokens): 4 units at 40/s of its DRAM candidate (``quick-dram``: kept as extents,
    each node's DRAM prewarmed) or its pool candidate (``quick-pool``: 4 pool nodes, so per
    block), the probe's window scaled by ``scale``."""
    from kvsim.hardware import node_catalog, pool_node_catalog
    from kvsim.plan.planner import Probe, probe_scenario
    from kvsim.plan.quick import parse_candidates, quick_scenario_text

    text = quick_scenario_text(model="qwen3-8b", targets=[40.0], slo={"ttft_p99": 2.0, "tpot_p99": 0.1},
                               candidates=parse_candidates(QUICK, node_catalog().names(), pool_node_catalog().names()),
                               prompt_tokens=8192, output_tokens=200, shared_prefix_tokens=7168)
    system = {"quick-dram": "l20-8x_dram-512GiB", "quick-pool": "l20-8x_pool-nvme-storage-16x"}[case]
    probe = probe_scenario(kvsim.parse_scenario(text, "quick.yaml"), Probe(system, 4, 40.0))
    return probe.with_changes({"duration": probe.spec.duration * scale, "warmup": probe.spec.warmup * scale})


def system_points(scenario: kvsim.Scenario):
    """``(point, system name, one-system point)`` for every system at every point."""
    for point in scenario.points:
        for name in point.spec.systems:
            alone = point.spec.model_copy(update={"systems": {name: point.spec.systems[name]}})
            yield point, name, ScenarioPoint(point.index, point.params, alone, point.catalogs)


def measure_point(scenario: kvsim.Scenario, point: ScenarioPoint, repeat: int = 1, earlier: dict | None = None) -> dict:
    """Run every system of ``point`` (``run_point``: requests drawn once) ``repeat`` times; the
    least CPU time, the requests simulated and the model's estimate of the same run. ``earlier``
    (a row of an earlier run) gives the measurement instead of running."""
    if earlier is not None:
        measured = {k: earlier[k] for k in ("cpu_s", "cpu_s_all", "requests", "iterations")}
    else:
        cpu = []
        for _ in range(repeat):
            forget_document_chains()  # (hashed once per process: each run starts as a new one would)
            start = time.process_time()
            runs = run_point(scenario, point)
            cpu.append(time.process_time() - start)
        measured = {"cpu_s": min(cpu), "cpu_s_all": cpu, "requests": int(sum(r.records.n for r in runs)),
                    "iterations": int(sum(r.iterations for r in runs))}
    shape = workload_shape(scenario, point, point_requests(scenario, point))
    counts, _ = point_cost(scenario, point, shape)
    return {**measured, "counts": counts.as_dict(), "estimate_cpu_s": counts.cpu_s(),
            "estimate_requests": counts.request}


def machine_text() -> str:
    """Where the rates were measured (the speed report's description of the machine)."""
    where = machine()
    return f"kvsim commit {where['commit']}, Python {where['python']}, {where['cpu']}"


def use_backend(choice: str | None) -> str:
    """Make every run of this process use engine backend ``choice`` (None: the one ``auto``
    resolves to) and return it; refuses ``compiled`` where it is not built.

    Runs choose their backend when they start (``engine.backend: auto`` reads ``KVSIM_BACKEND``),
    so setting the variable here reaches every case of the script.
    """
    from kvsim.backend import ENV, BackendError, resolve

    try:
        backend = resolve(choice or "auto")
    except (BackendError, ValueError) as error:
        raise SystemExit(f"{Path(sys.argv[0]).name}: {error}") from None
    os.environ[ENV] = backend
    return backend


def fit(rows: list[dict], ridge: float = 0.0) -> dict[str, float]:
    """Non-negative least squares of measured CPU-s on the path counts, relative errors.

    ``ridge`` > 0 adds ``sqrt(ridge) x rate`` (each column scaled to at most 1 per case) as a
    residual of every path: paths whose counts move together across the cases then share their
    cost rather than one taking all of it and the other none, so a refit on new noise moves the
    rates less (it costs a share ``ridge`` of one case's relative error per unit of rate).
    """
    a = np.array([[row["counts"][p] for p in PATHS] for row in rows], dtype=float)
    b = np.array([row["cpu_s"] for row in rows], dtype=float)
    w = 1.0 / np.maximum(b, 1e-3)
    scale = np.maximum(np.abs(a * w[:, None]).max(axis=0), 1e-30)  # columns of comparable size
    design, target = a * w[:, None] / scale, b * w
    if ridge > 0:
        design = np.vstack([design, np.sqrt(ridge) * np.eye(len(PATHS))])
        target = np.concatenate([target, np.zeros(len(PATHS))])
    x, _ = nnls(design, target)
    return {p: float(v / s) for p, v, s in zip(PATHS, x, scale)}


def rates_table(rows: list[dict], rates: dict[str, float], backend: str, how: str, where: str) -> str:
    """Markdown of a fit: the rates of every path, then each case's measured and fitted CPU-s
    (``where``: the machine and commit the runs were measured at)."""
    lines = [f"The {backend} backend, fitted on {len(rows)} runs ({how}; measured at {where}):", "",
             "| path | CPU-s per unit |", "|---|---:|"]
    lines += [f"| {p} | {rates[p]:.3g} |" for p in PATHS]
    lines += ["", "| case | system | requests | measured CPU-s | fitted CPU-s | fitted / measured |",
              "|---|---|---:|---:|---:|---:|"]
    for row in rows:
        fitted = sum(row["counts"][p] * rates[p] for p in PATHS)
        lines.append(f"| {row['case']} | {row['system']} | {row['requests']:,} | {row['cpu_s']:.3f} | {fitted:.3f} "
                     f"| {fitted / row['cpu_s']:.2f} |")
    return "\n".join(lines)


def write_between(out: Path, start: str, end: str, text: str) -> None:
    """Replace the lines between ``start`` and ``end`` in ``out`` (appending the block if missing)."""
    old = out.read_text(encoding="utf-8") if out.exists() else ""
    block = f"{start}\n{text}\n{end}"
    if start in old and end in old:
        new = old[:old.index(start)] + block + old[old.index(end) + len(end):]
    else:
        new = old + ("\n" if old and not old.endswith("\n") else "") + block + "\n"
    out.write_text(new, encoding="utf-8")


MODULE = HERE.parent / "kvsim" / "plan" / "cost_rates.py"


def rates_source(rates: dict[str, float], backend: str, command: str, where: str) -> str:
    """The Python of ``RATES[backend]``'s mapping in ``kvsim/plan/cost_rates.py``."""
    import textwrap

    note = (f"measured by `{command}` (each run the least CPU time of --repeat) at {where}, on the "
            "project's 2-core machine while other jobs shared it (docs/run_cost.md). Zero: the fit found no "
            "cost there beyond what the other paths carry.")
    lines = [f"_{backend.upper()} = MappingProxyType({{"]
    lines += ["    # " + line for line in textwrap.wrap(note, 96)]
    lines += [f'    "{p}": {float(f"{rates[p]:.3g}")!r},' for p in PATHS]
    return "\n".join(lines + ["})"])


def write_module(rates: dict[str, float], backend: str, command: str, where: str, module: Path = MODULE) -> None:
    """Replace ``RATES[backend]``'s mapping (``_PYTHON = MappingProxyType({...})``) in ``module``."""
    import re

    text = module.read_text(encoding="utf-8")
    pattern = re.compile(rf"^_{backend.upper()} = MappingProxyType\(\{{\n.*?^\}}\)$", re.M | re.S)
    if not pattern.search(text):
        raise SystemExit(f"cost_rates.py: no _{backend.upper()} mapping in {module}")
    module.write_text(pattern.sub(lambda _: rates_source(rates, backend, command, where), text), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("python", "compiled"), default=None,
                        help="engine backend to measure (default: the one engine.backend: auto runs here)")
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--capacity", type=float, default=3.55, help="ladder saturation per instance, requests/s")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default=",".join(CASES))
    parser.add_argument("--ridge", type=float, default=0.01, help="share of a case's relative error one unit "
                        "of (scaled) rate costs: splits the cost of paths that move together (0: plain NNLS)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--out", type=Path, help="a Markdown page to write the fit into (between the backend's "
                        "cost-rates markers)")
    parser.add_argument("--write-rates", action="store_true",
                        help="write the fitted rates into kvsim/plan/cost_rates.py (RATES[backend])")
    parser.add_argument("--reuse", type=Path, help="a --json file of an earlier run at the same --scale: its "
                        "measurements are kept (nothing runs), the model's counts recomputed and refitted")
    args = parser.parse_args(argv)
    earlier, backend, where = {}, None, machine_text()
    if args.reuse:
        saved = json.loads(args.reuse.read_text(encoding="utf-8"))
        where = saved.get("machine", "an unrecorded commit")
        earlier = {(r["case"], r["system"]): r for r in saved["rows"]}
        backend = saved.get("backend", "python")  # files written before backends were named ran python
        if args.backend not in (None, backend):
            parser.error(f"--reuse {args.reuse} was measured with the {backend} backend, not {args.backend}")
    else:
        backend = use_backend(args.backend)
    rows = []
    for case in args.only.split(","):
        scenario = case_scenario(case, args.scale, args.capacity)
        for _point, name, alone in system_points(scenario):
            row = {"case": case, "system": name,
                   **measure_point(scenario, alone, args.repeat, earlier.get((case, name)))}
            rows.append(row)
            print(f"{case:18s} {name:16s} {row['requests']:7,d} requests {row['cpu_s']:8.3f} CPU-s", flush=True)
    rates = fit(rows, args.ridge)
    how = f"measurements of {args.reuse}" if args.reuse else f"best of {args.repeat}"
    print(f"\nfitted on {len(rows)} runs ({backend} backend, measured at {where}, --scale {args.scale}, {how}):")
    print(f"{'case':18s} {'system':16s} {'measured':>9s} {'fitted':>9s} {'ratio':>6s}")
    for row in rows:
        fitted = sum(row["counts"][p] * rates[p] for p in PATHS)
        print(f"{row['case']:18s} {row['system']:16s} {row['cpu_s']:9.3f} {fitted:9.3f} {fitted / row['cpu_s']:6.2f}")
    print(f"\nrates (CPU-s per unit) for kvsim/plan/cost_rates.py, RATES[{backend!r}]:")
    for p in PATHS:
        print(f'    "{p}": {rates[p]:.3g},')
    command = "python benchmarks/cost_rates.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.write_rates:
        write_module(rates, backend, command.strip(), where)
        print(f"wrote RATES[{backend!r}] into {MODULE}")
    if args.out:
        write_between(args.out, f"<!-- cost-rates:{backend} -->", f"<!-- /cost-rates:{backend} -->",
                      rates_table(rows, rates, backend, f"`{command.strip()}`, --scale {args.scale}, {how}", where))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": where, "backend": backend, "command": command.strip(), "scale": args.scale,
                                         "rows": rows, "rates": rates}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
