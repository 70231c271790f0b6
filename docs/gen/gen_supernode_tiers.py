"""Kimi K2 decode at EP 64 and 128 on Atlas 850E (950DT) supernodes, inside one first-layer UB
group and split over two groups joined by a second layer (issue 26 item 6).

``tiers_block()`` is the table of ``docs/explanation/supernode-tiers.md`` (a generated block, kept
current by ``gen_pages.py --check``); ``python docs/gen/gen_supernode_tiers.py`` also draws
``docs/explanation/supernode_tiers.png``. Every figure comes from the step model as the simulator
runs it: the pool is sized as ``kvsim run`` sizes it, with the links its layout spans over the
tiers given, and the step is :meth:`kvsim.models.layout_step.LayoutStepTime.breakdown` of a decode
batch.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen_text import BANNER, ROOT  # noqa: E402

CONTEXT_TOKENS = 3_200  # as docs/explanation/ep-decode.md: pd_ratio's median prompt + half its output
SEQS_PER_RANK = (1, 16, 64)
SCENARIO = """
name: supernode-tiers
duration: 10 s
model: kimi-k2
dtype: mxfp4
kv_dtype: fp8
workload:
  arrival: {{kind: poisson, rate: 1/s}}
  input_tokens: {{kind: fixed, value: 3000}}
  output_tokens: {{kind: fixed, value: 400}}
systems:
  s:
    node: atlas-850e
    nodes: {nodes}
    instance: {{tp: {ep}, ep: {ep}, dp_attention: {ep}}}
    scale_up: {{tiers: [{tiers}]}}
"""
CASES = (
    ("one group", "{{nodes: {n}}}"),
    ("one group, message passing", "{{nodes: {n}, transport: message_passing}}"),
    ("two groups, 1:1", "{{nodes: {h}}}, {{nodes: {n}}}"),
    ("two groups, 2:1", "{{nodes: {h}}}, {{nodes: {n}, oversubscription: 2}}"),
    ("two groups, 4:1", "{{nodes: {h}}}, {{nodes: {n}, oversubscription: 4}}"),
    ("two groups, 4:1, message passing", "{{nodes: {h}}}, {{nodes: {n}, oversubscription: 4, "
                                        "transport: message_passing}}"),
)
"""(label, tiers): the instance's ``ep / 8`` nodes as one first-layer group, or as two groups of
half as many over a second layer (non-blocking, or its uplinks oversubscribed 2:1 or 4:1)."""


def rows() -> list[dict]:
    """One row per (EP, case, sequences per rank)."""
    import kvsim
    from kvsim.dtypes import DTYPE_BYTES
    from kvsim.models.parallel import alltoall_bytes_per_card, alltoall_tier_bytes
    from kvsim.models.step_time import ACTIVATION_DTYPE, BatchShape
    from kvsim.sim.sizing import size_system

    out = []
    for ep in (64, 128):
        nodes = ep // 8
        for label, tiers in CASES:
            text = SCENARIO.format(nodes=nodes, ep=ep, tiers=tiers.format(n=nodes, h=nodes // 2))
            scenario = kvsim.parse_scenario(text, "supernode-tiers.yaml")
            pool = size_system(scenario.spec, "s", scenario.catalogs).pool("main")
            model, stage = pool.step_model(), pool.links.stage
            moe = model.model.moe
            for per_rank in SEQS_PER_RANK:
                seqs = per_rank * ep
                step = model.breakdown(BatchShape(decode_seqs=seqs, decode_context_tokens=seqs * CONTEXT_TOKENS,
                                                  sampled_seqs=seqs))
                dispatch = alltoall_bytes_per_card(seqs / ep, model.model.hidden_size,
                                                   DTYPE_BYTES[ACTIVATION_DTYPE], moe.num_experts,
                                                   moe.experts_per_token, ep)
                first, second, _ = alltoall_tier_bytes(dispatch, stage)
                out.append({"ep": ep, "case": label, "per_rank": per_rank, "tpot_s": step.total_s,
                            "comm_s": step.comm_s, "first_bytes": first, "second_bytes": second})
    return out


def tiers_block() -> str:
    data = rows()
    base = {(r["ep"], r["per_rank"]): r for r in data if r["case"] == "one group"}
    lines = [BANNER.format(source="docs/gen/gen_supernode_tiers.py (kvsim's step model)"), "",
             "| EP (servers) | fabric | seqs / rank | dispatch bytes / card staying in its group | crossing the second layer "
             "| collectives ms | TPOT ms | TPOT vs one group |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in data:
        ref = base[(r["ep"], r["per_rank"])]
        lines.append(f"| {r['ep']} ({r['ep'] // 8}) | {r['case']} | {r['per_rank']} | "
                     f"{r['first_bytes'] / 1e3:,.1f} KB | {r['second_bytes'] / 1e3:,.1f} KB | "
                     f"{r['comm_s'] * 1e3:.2f} | **{r['tpot_s'] * 1e3:.2f}** | {r['tpot_s'] / ref['tpot_s']:.2f}x |")
    lines += ["", f"Context {CONTEXT_TOKENS:,} tokens per sequence; every tier at the card's figures (1 TB/s, "
                  "3 us) unless oversubscribed; memory semantics unless marked. Bytes: one card's share of one "
                  "dispatch (each MoE layer has a dispatch and a combine)."]
    return "\n".join(lines)


def figure(path: Path) -> None:
    """Collectives and TPOT per case at 16 sequences per rank, EP 64 and 128."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = [r for r in rows() if r["per_rank"] == 16]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), constrained_layout=True, sharey=True)
    for ax, ep in zip(axes, (64, 128)):
        pts = [r for r in data if r["ep"] == ep]
        labels = [r["case"].replace(", ", "\n", 1) for r in pts]
        comm = [r["comm_s"] * 1e3 for r in pts]
        rest = [(r["tpot_s"] - r["comm_s"]) * 1e3 for r in pts]
        ax.barh(labels, rest, color="#4c72b0", label="rest of the step", zorder=2)
        ax.barh(labels, comm, left=rest, color="#dd8452", label="collectives", zorder=2)
        for y, (a, b) in enumerate(zip(rest, comm)):
            ax.text(a + b + 0.1, y, f"{a + b:.2f} ms", va="center", fontsize=8)
        ax.set_xlabel("TPOT, ms")
        ax.set_title(f"Kimi K2 decode, EP {ep} ({ep // 8} Atlas 850E), 16 seqs / rank", fontsize=10)
        ax.grid(axis="x", alpha=0.3, zorder=0)
        ax.set_xlim(0, max(r["tpot_s"] for r in pts) * 1e3 * 1.15)
    axes[0].invert_yaxis()  # (the axes share y: once) the first case on top
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="outside lower center", ncol=2)
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    figure(ROOT / "docs" / "explanation" / "supernode_tiers.png")
    print("wrote docs/explanation/supernode_tiers.png (the table: docs/gen/gen_pages.py)")
