"""The disaggregation invariants of the invariant suite (see :mod:`invariant_checks`): the KV a
P->D handoff moves, and what a P:D controller may do.

:func:`handed_kv_bytes` works out, from the model's own figures, the bytes the cards of a decode
instance hold for a prompt, which is what a handoff moves; :func:`handoff_problems` holds every
handoff of a run to it, and :func:`controller_problems` checks a controller's decisions and
switches against its spec.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["KV_DTYPE_BYTES", "handed_kv_bytes", "handoff_problems", "controller_problems"]

KV_DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5, "mxfp4": 4.25 / 8}
"""Bytes per KV element, written out here rather than read from kvsim (mxfp4: blocks of 32
four-bit values share one 8-bit scale, OCP MX v1.0)."""


def handed_kv_bytes(model, layout, kv_dtype: str, tokens: np.ndarray) -> np.ndarray:
    """KV bytes the cards of a decode instance of ``layout`` hold for prompts of ``tokens``: what
    a P->D handoff moves, one flow per decode card. Worked out from the model's own figures, not
    through kvsim's KV functions.

    Per layer, a token's KV on one card is K and V of each of its KV heads (``head_dim`` values
    each): the heads are split over the ``tp / dp_attention`` cards of the sequence's attention
    group, and replicated when there are more cards than KV heads (engines give each card at
    least one), so the group holds ``max(kv_heads, cards)`` heads. MLA keeps one latent of
    ``kv_lora_rank + qk_rope_head_dim`` values per layer, whole on every card of the group.
    Pipeline stages hold their own layers (all of them once over the stages); with data-parallel
    attention a sequence lives on one attention group. Sliding-window layers keep only the last
    ``sliding_window`` tokens."""
    b = KV_DTYPE_BYTES[kv_dtype]
    group = layout.tp // layout.dp_attention
    if model.mla is not None:
        per_layer_token = group * (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * b
    else:
        per_layer_token = 2 * max(model.num_kv_heads, group) * model.head_dim * b
    layers = model.num_layers
    sliding = 0 if model.sliding_window is None else (
        layers if model.sliding_window_layers is None else model.sliding_window_layers)
    tokens = tokens.astype(float)
    kept = (layers - sliding) * tokens + sliding * np.minimum(tokens, model.sliding_window or 0)
    return per_layer_token * kept


def handoff_problems(problems: list[str], name: str, run, system, spec, rtol: float) -> None:
    """Each handoff that landed moved exactly its prompt's KV as the decode instance holds it
    (:func:`handed_kv_bytes`); one its client gave up on in flight moved no more; a request
    never handed off moved nothing; the records' bytes of handoffs started in the window add up
    to what the links counted for handoffs. ``system`` is the live system of ``run``; ``rtol``
    the tolerance of two float sums of the same terms."""
    r = run.records
    col = r.column
    started, landed = ~np.isnan(col("handoff_start_s")), ~np.isnan(col("handoff_landed_s"))
    moved, decode = col("handoff_bytes"), col("instance")
    if (landed & ~started).any():
        problems.append(f"{name}: a handoff landed that never started")
    if (moved[~started] != 0).any():
        problems.append(f"{name}: {int((moved[~started] != 0).sum())} requests never handed off have handoff bytes")
    if (started & (col("prefill_instance") == decode)).any():
        problems.append(f"{name}: a request decoded on the instance that computed its prompt, after a handoff")
    rows = np.flatnonzero(started)
    expected = np.zeros(r.n)
    kv_dtype = spec.system_kv_dtype(name)
    for index in np.unique(decode[rows]):
        pool = system.placements[int(index)].pool
        mine = rows[decode[rows] == index]
        expected[mine] = handed_kv_bytes(pool.model, pool.layout, kv_dtype, col("input_tokens")[mine])
    whole = started & landed
    off = whole & ~np.isclose(moved, expected, rtol=rtol, atol=0.0)
    if off.any():
        k = int(np.flatnonzero(off)[0])
        pool = system.placements[int(decode[k])].pool
        problems.append(f"{name}: {int(off.sum())} handoffs moved other than their prompts' KV (request {k}: "
                        f"{moved[k]!r} bytes for {int(col('input_tokens')[k])} prompt tokens, expected "
                        f"{expected[k]!r} on a decode instance of {pool.layout.label()} ({pool.model.name}, "
                        f"{kv_dtype} KV))")
    cut = started & ~landed
    if (cut & ((moved < 0) | (moved > expected * (1 + rtol)))).any():
        problems.append(f"{name}: a handoff cut short moved more than its prompt's KV, or less than nothing")
    if (cut & np.isnan(col("aborted_s")) & ~np.isnan(col("finish_s"))).any():
        problems.append(f"{name}: a request finished whose handoff never landed")
    start, end = run.summary["window"]["start_s"], run.summary["window"]["end_s"]
    t = col("handoff_start_s")
    in_window = started & (t >= start) & (t <= end)
    counted = system.transfers.bytes_by_purpose.get("handoff", 0.0)
    recorded = float(moved[in_window].sum())
    if not math.isclose(counted, recorded, rel_tol=rtol, abs_tol=1e-6):
        problems.append(f"{name}: the links carried {counted!r} handoff bytes in the window, the records "
                        f"{recorded!r} for the handoffs started in it")


def controller_problems(problems: list[str], name: str, run, spec, instances: int, rtol: float) -> None:
    """The P:D controller's decisions and switches: every instance serving in one role or
    switching; no decision moves more than its step, nor takes a role below its minimum; each
    switch drains before it changes role and then stays out for ``switch_time``; only instances of
    switchable pools switch."""
    control = spec.systems[name].controller
    for d in run.decisions:
        if d["prefill"] + d["decode"] + d["switching"] != instances:
            problems.append(f"{name}: at {d['time_s']:.6g} s {d['prefill']} prefill + {d['decode']} decode + "
                            f"{d['switching']} switching instances, of {instances}")
            break
        moved = d["moved"]
        most = 0 if control is None or control.kind == "static" else (
            control.step if control.kind == "threshold" else control.max_step)
        if abs(moved) > most:
            problems.append(f"{name}: a decision at {d['time_s']:.6g} s moved {moved} instances, its step is {most}")
            break
        if moved and (d["prefill_target"] < control.min_prefill if moved < 0 else d["decode_target"] < control.min_decode):
            problems.append(f"{name}: a decision at {d['time_s']:.6g} s left {d['prefill_target']} prefill and "
                            f"{d['decode_target']} decode instances (minimums {control.min_prefill}, "
                            f"{control.min_decode})")
            break
    if len(run.switches) > sum(abs(d["moved"]) for d in run.decisions):
        problems.append(f"{name}: {len(run.switches)} switches for {sum(abs(d['moved']) for d in run.decisions)} "
                        "instances the decisions moved")
    pools = spec.systems[name].pool_specs()
    for sw in run.switches:
        if not pools[sw["pool"]].may_switch:
            problems.append(f"{name}: instance {sw['instance']} of pool {sw['pool']} switched, a pool of fixed role")
            break
        if sw["from_role"] == sw["to_role"] or not sw["decided_s"] <= sw["drained_s"] <= sw["ready_s"]:
            problems.append(f"{name}: switch of instance {sw['instance']}: {sw}")
            break
        if sw["ready_s"] - sw["drained_s"] < control.switch_time * (1 - rtol):
            problems.append(f"{name}: instance {sw['instance']} back in service {sw['ready_s'] - sw['drained_s']:.6g} s "
                            f"after draining, switch_time {control.switch_time:g} s")
            break
    if getattr(control, "on_switch", "drain") == "migrate":
        # every KV move is one request's, counted once in its record and once in its switch's
        moves = sum(sw["migrated_requests"] for sw in run.switches)
        counted = int(run.records.column("migrations").sum())
        if moves != counted:
            problems.append(f"{name}: the switches moved {moves} sequences' KV, the records count {counted}")
        for sw in run.switches:
            if (sw["migrated_requests"] > 0) != (sw["migrated_bytes"] > 0) or sw["from_role"] != "decode" and (
                    sw["migrated_requests"] or sw["migration_kept"]):
                problems.append(f"{name}: switch of instance {sw['instance']}: {sw}")
                break
