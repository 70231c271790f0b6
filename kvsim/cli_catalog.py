"""``kvsim catalog``: the built-in accelerators, nodes, KV pool nodes and models, a line each or as JSON."""

from __future__ import annotations

import argparse
import json

from kvsim.units import format_quantity

__all__ = ["catalog_command", "describe"]


def catalog_command(args: argparse.Namespace) -> int:
    from kvsim.hardware import accelerator_catalog, node_catalog, pool_node_catalog
    from kvsim.models import model_catalog

    families = {"accelerators": accelerator_catalog(), "nodes": node_catalog(), "pool_nodes": pool_node_catalog(),
                "models": model_catalog()}
    chosen = [args.family] if args.family else list(families)
    if args.json:
        payload = {f: {n: families[f][n].model_dump(mode="json") for n in families[f].names()} for f in chosen}
        print(json.dumps(payload, indent=2))
        return 0
    for family in chosen:
        print(f"{family}:")
        catalog = families[family]
        for name in catalog.names():
            print(f"  {name:18s} {describe(family, catalog[name])}")
        print()
    print("(units: decimal GB/TB = 1e9/1e12 bytes, GiB = 2^30; sources: kvsim catalog --json)")
    return 0


def describe(family: str, spec) -> str:
    """One line on catalog entry ``spec`` of ``family``, with units."""
    if family == "accelerators":
        peaks = ", ".join(f"{d} {format_quantity(v, 'flops')}" for d, v in spec.flops.items())
        link = (f"scale-up {format_quantity(spec.scale_up_bandwidth, 'bandwidth')}/direction"
                if spec.scale_up_bandwidth else f"no scale-up link ({spec.host_link})")
        return (f"{spec.vendor} {format_quantity(spec.memory_bytes, 'bytes')} {spec.memory_kind} "
                f"@ {format_quantity(spec.memory_bandwidth, 'bandwidth')}; {peaks}; {link}")
    if family == "nodes":
        return (f"{spec.accelerators_per_node} x {spec.accelerator}; DRAM "
                f"{format_quantity(spec.host_dram_bytes, 'bytes')}; {spec.nvme.count} NVMe; "
                f"{spec.nics.count} x {spec.nics.bandwidth * 8 / 1e9:g} Gbit/s NIC")
    if family == "pool_nodes":
        nics = spec.nics
        reach = (f"scale-up ports {format_quantity(spec.scale_up_bandwidth, 'bandwidth')}/direction"
                 if getattr(spec, "scale_up_bandwidth", None) else
                 f"{nics.count} x {nics.bandwidth * 8 / 1e9:g} Gbit/s NIC at {nics.efficiency:g} of line rate")
        return (f"{spec.medium.upper()} {format_quantity(spec.capacity_bytes, 'bytes')}; read "
                f"{format_quantity(spec.read_bandwidth, 'bandwidth')}, write "
                f"{format_quantity(spec.write_bandwidth, 'bandwidth')}; {reach}")
    kind = ("MLA" if spec.mla else "GQA") + (" MoE" if spec.moe else "")
    return (f"{spec.hf_id}: {spec.total_params / 1e9:.1f} B params ({spec.active_params / 1e9:.1f} B active), "
            f"{kind}, KV {spec.kv_bytes_per_token('bf16') / 1024:.0f} KiB/token (bf16)")
