"""The arithmetic of large-EP decode on Atlas 850E (950DT) supernodes (issue 26 item 7): one
decode step of Kimi K2 at expert parallelism 8 -> 128, from kvsim's own step model.

``ep_decode_block()`` is the table of ``docs/explanation/ep-decode.md`` (a generated block, kept
current by ``gen_pages.py --check``); ``python docs/gen/gen_ep_decode.py`` also draws
``docs/explanation/ep_decode.png``. Every figure comes from the model as the simulator runs it:
the pool is sized as ``kvsim run`` sizes it (weights, KV room, the links the layout spans), and
the step is :meth:`kvsim.models.layout_step.LayoutStepTime.breakdown` of a decode batch.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen_text import BANNER, ROOT  # noqa: E402

EP_DEGREES = (8, 16, 32, 64, 128)
SEQS_PER_RANK = (1, 16, 64)
CONTEXT_TOKENS = 3_200
"""Mean context a decode step attends to: ``pd_ratio``'s median prompt (3,000 tokens) plus half
its median output (400)."""

SCENARIO = """
name: ep-decode
duration: 10 s
model: kimi-k2
dtype: mxfp4
kv_dtype: fp8
workload:
  arrival: {{kind: poisson, rate: 1/s}}
  input_tokens: {{kind: fixed, value: 3000}}
  output_tokens: {{kind: fixed, value: 400}}
systems:
  ep{ep}:
    pools:
      prefill: {{node: atlas-850, nodes: 1, instance: {{tp: 8}}, role: prefill}}
      decode: {{node: atlas-850e, nodes: {nodes}, instance: {{tp: {ep}, ep: {ep}, dp_attention: {ep}}}, role: decode}}
    scale_up_domain_nodes: {domain}
"""
"""One decode pool of ``ep / 8`` Atlas 850E servers in one UB scale-up domain (a single-layer
supernode holds 32-96 servers), one instance of tp = ep = dp_attention = ep: each card one
attention rank and ``384 / ep`` of Kimi K2's experts."""


def rows() -> list[dict[str, float]]:
    """One row per (EP degree, sequences per rank): the step's parts, seconds and bytes."""
    import kvsim
    from kvsim.models.step_time import BatchShape
    from kvsim.sim.sizing import size_system

    out = []
    for ep in EP_DEGREES:
        nodes = ep // 8
        scenario = kvsim.parse_scenario(SCENARIO.format(ep=ep, nodes=nodes, domain=nodes + 1), "ep-decode.yaml")
        pool = size_system(scenario.spec, f"ep{ep}", scenario.catalogs).pool("decode")
        model = pool.step_model()
        kv_room = pool.kv_tokens_per_instance / ep / CONTEXT_TOKENS
        for per_rank in SEQS_PER_RANK:
            seqs = per_rank * ep
            step = model.breakdown(BatchShape(decode_seqs=seqs, decode_context_tokens=seqs * CONTEXT_TOKENS,
                                              sampled_seqs=seqs))
            out.append({"ep": ep, "nodes": nodes, "per_rank": per_rank, "tpot_s": step.total_s,
                        "weights_bytes": model.weight_bytes_per_card(seqs), "memory_s": step.memory_s,
                        "compute_s": step.compute_s, "comm_s": step.comm_s, "kernels_s": step.kernels_s,
                        "launches": model.launches_per_pass, "overhead_s": step.overhead_s, "kv_room": kv_room,
                        "tokens_per_s": seqs / step.total_s})
    return out


def _ms(value: float) -> str:
    return f"{value * 1e3:.2f}"


def ep_decode_block() -> str:
    lines = [BANNER.format(source="docs/gen/gen_ep_decode.py (kvsim's step model)"), "",
             "| EP (cards) | servers | seqs / rank | TPOT ms | weights / card / step | memory ms | compute ms "
             "| collectives ms | kernel gaps ms (launches) | host ms | output tok/s | KV room, seqs / rank |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows():
        lines.append(
            f"| {r['ep']} | {r['nodes']} | {r['per_rank']} | **{_ms(r['tpot_s'])}** | "
            f"{r['weights_bytes'] / 1e9:.2f} GB | {_ms(r['memory_s'])} | {_ms(r['compute_s'])} | {_ms(r['comm_s'])} | "
            f"{_ms(r['kernels_s'])} ({int(r['launches']):,}) | {_ms(r['overhead_s'])} | {r['tokens_per_s']:,.0f} | "
            f"{r['kv_room']:,.0f} |")
    lines += ["", f"Context {CONTEXT_TOKENS:,} tokens per sequence; TPOT = max(memory, compute) + collectives + "
                  "kernel gaps + host (the step model's sum). Weights: bytes one card streams per step (its share "
                  "of attention and the dense layers, and every one of its experts some token in the batch picks)."]
    return "\n".join(lines)


def figure(path: Path) -> None:
    """Stacked bars of the step's parts at 16 sequences per rank, and TPOT at each batch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = rows()
    fig, (parts, lines) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    at16 = [r for r in data if r["per_rank"] == 16]
    labels = [f"EP {r['ep']}\n{r['nodes']} server{'s' if r['nodes'] > 1 else ''}" for r in at16]
    bottom = [0.0] * len(at16)
    for key, name, colour in (("memory_s", "HBM (weights + KV; or compute, if longer)", "#4c72b0"), ("comm_s", "collectives", "#dd8452"),
                              ("kernels_s", "kernel gaps", "#c44e52"), ("overhead_s", "host", "#8c8c8c")):
        values = [max(r[key], r["compute_s"]) * 1e3 if key == "memory_s" else r[key] * 1e3 for r in at16]
        parts.bar(labels, values, bottom=bottom, label=name, color=colour, zorder=2)
        bottom = [b + v for b, v in zip(bottom, values)]
    for x, total in enumerate(bottom):
        parts.text(x, total + 0.3, f"{total:.1f} ms", ha="center", fontsize=9)
    parts.axhspan(5, 10, color="#55a868", alpha=0.15, label="launch claim, 5-10 ms", zorder=0)
    parts.set_ylabel("time per output token, ms")
    parts.set_title("Kimi K2 decode step, 16 sequences per rank", fontsize=10)
    parts.legend(fontsize=8, loc="upper right")
    for per_rank, marker in zip(SEQS_PER_RANK, ("o", "s", "^")):
        pts = [r for r in data if r["per_rank"] == per_rank]
        lines.plot([r["ep"] for r in pts], [r["tpot_s"] * 1e3 for r in pts], marker=marker,
                   label=f"{per_rank} seq{'s' if per_rank > 1 else ''} / rank")
    lines.axhspan(5, 10, color="#55a868", alpha=0.15, zorder=0, label="launch claim, 5-10 ms")
    lines.set_xscale("log", base=2)
    lines.set_xticks(list(EP_DEGREES), [str(e) for e in EP_DEGREES])
    lines.minorticks_off()
    lines.set_xlabel("expert parallelism (cards, one attention rank each)")
    lines.set_ylabel("TPOT, ms")
    lines.set_ylim(bottom=0)
    lines.set_title("TPOT against EP degree", fontsize=10)
    lines.legend(fontsize=8)
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    figure(ROOT / "docs" / "explanation" / "ep_decode.png")
    print("wrote docs/explanation/ep_decode.png (the table: docs/gen/gen_pages.py)")
