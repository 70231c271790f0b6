"""Early exit (issue 28 item 2): tokens that stop at an intermediate layer, and what a decode step
saves by it -- most of all under weight offload (FlexEE, arXiv:2609.17008).

Exit heads after some decoder layers decide, per token, to stop there. ``engine.early_exit``
gives the layers that carry a head and the per-token distribution of the layer a token exits at
(a fixed profile: ``exit_layers: [8, 16, 32], distribution: [0.3, 0.3, 0.4]`` on a 32-layer
model; listing the last layer says "runs every layer"). FlexEE reports the end-to-end gain of its
exits on Llama2-7B as 1.27x with every layer in HBM and 3.16x with half of them offloaded, on
Llama3-8B 1.25x and 2.83x (arXiv:2609.17008): the skipped layers' weights are never moved.

The batch runs to its deepest exit. A batched decode step is one pass of matrix multiplies over
all its sequences: a layer runs for the whole batch or not at all (running it for some rows only
saves nothing of its weight read or its transfer, which are the step's cost when decode is memory
bound), so the step stops only when every token has exited. Its depth is the largest of ``b``
draws from the per-token distribution ``F``: ``P(depth <= e) = F(e)^b``, drawn with one uniform
``u`` per step by inverse CDF (the smallest exit layer ``e_i`` with ``F(e_i) >= u^(1/b)``), from
the named stream ``engine.early_exit.<instance>``. Its mean ``sum_i e_i (F_i^b - F_(i-1)^b)``
climbs to the deepest exit layer as the batch grows: the saving shrinks with batch size, and
:meth:`kvsim.models.early_exit_step.EarlyExitStepTime.iteration_time_s` (what the planners read) is that expectation.

A decode-only step to depth ``d`` of ``L`` layers (``f = d / L``; the roofline's terms as in
:mod:`kvsim.models.step_time`, split into the layers' share and the rest)::

    compute_s = f * layers' compute + LM head + heads * head_cost * one layer's linear FLOPs
    memory_s  = f * (layers' weights + KV read) + LM head weights + heads * head_cost * one layer's bytes
                + KV fill                                          (kv_fill: copy, the default)
    comm_s, kernels_s, remote_s scale by f (all-reduces and launches are per layer); host time does not

``heads`` are the exit heads the step evaluates: every exit layer below ``L`` it reaches (each
says "go on" but the last, which says "stop"). ``head_cost`` is one head's share of a decoder
layer's weights and linear FLOPs (default 0.01: a small confidence classifier; ASSUMPTION, no
published figure; a head that reuses the LM head costs ``vocab / (12 hidden)`` of a dense layer,
about 0.65 on Llama2-7B). The heads' weights sit in HBM beside the model (sizing charges them).

Under weight offload the last ``k`` layers stream from the host (:mod:`kvsim.models.weight_offload`);
a step to depth ``d`` needs ``k' = max(0, d - (L - k))`` of them, so the transfer bound becomes
``max(memory, k' tau + c + extra, tau + k' c)`` with ``c = max(compute, memory) / d``: exiting
at ``d`` saves ``(L - d) / L`` of the layers' compute and every transfer past ``d``. Prefetches
issued for layers past the exit are dropped off the critical path (ASSUMPTION: the engine issues
a layer's transfer only when the previous one lands, so at most ``buffer_layers`` are wasted, on
an otherwise idle link).

KV of the skipped layers. A later token that runs deeper attends to this token's KV in layers it
skipped, so those entries must exist. ``kv_fill``:

- ``copy`` (default): the exited token's last hidden state is copied through the skipped layers
  as their KV entries (CALM-style state propagation): ``b * (L - d) * KV bytes per token per
  layer`` written at the card's KV bandwidth. Default because it needs none of the skipped
  layers' weights -- so none of their transfers, which is the saving FlexEE reports growing with
  the offloaded share.
- ``project``: the hidden state goes through each skipped layer's K and V projections:
  ``b * (L - d) * 2 hidden * kv_dim * 2`` FLOPs, plus reading those projections' weights (from HBM
  for resident layers, over the host link -- the ``extra`` above -- for offloaded ones). Closer to
  the KV the full model would have written; it pays part of the transfers back.

The self-speculative check (``check_every: n``; default none, the heads' confidence is final):
every ``n`` steps the skipped layers run once over the tokens drafted since, verifying them
(their KV rewritten with the full model's). Averaged per step (ASSUMPTION: no spike every ``n``
steps, every draft accepted): the skipped layers' compute for the step's tokens, ``1/n`` of
their weight reads, and ``1/n`` of their transfers if offloaded (part of ``extra``).

Prefill runs every layer (the prompt's KV is needed in all of them), and so does any iteration
carrying a prefill chunk: its prompt tokens are its deepest exit. Such iterations are costed as
without early exit, with no head evaluated.

Not modelled yet: a per-workload exit model (the distribution is one fixed profile per engine);
dense models with tensor parallelism inside one node only (as weight offload); rejected drafts;
coalesced decode runs (each step draws its depth, so an instance with early exit runs the
step-by-step engine loop).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from kvsim.models.llm import ModelSpec
from kvsim.models.parallel import Layout
from kvsim.models.weight_offload import layer_bytes_per_card
from kvsim.spec_types import FrozenSpec, NonNegativeFloat, PositiveInt, Share, field_errors

__all__ = ["EarlyExitSpec", "ExitProblem", "exit_sizing", "exit_cdf", "deepest_exit", "depth_probabilities",
           "expected_depth", "kv_fill_bytes", "exit_problems", "head_bytes_per_card"]


class EarlyExitSpec(FrozenSpec):
    """``engine.early_exit``: where tokens may stop, how often they do, and what it costs.

    Attributes
    ----------
    exit_layers : list of int
        Decoder layers (counted from 1) after which an exit head may stop a token, increasing;
        the model's last layer may close the list ("runs every layer").
    distribution : list of float
        Probability a token exits at each of ``exit_layers`` (same length, summing to 1).
    head_cost : float
        One exit head's weights and linear FLOPs as a share of one decoder layer's (default
        0.01; ASSUMPTION, see the module docstring).
    kv_fill : str
        How the skipped layers' KV is made: ``copy`` (the hidden state copied, bytes at the KV
        bandwidth; default) or ``project`` (through their K and V projections).
    check_every : int, optional
        Run the self-speculative check (the skipped layers over the drafted tokens) every this
        many decode steps; None (default): no check.
    """

    exit_layers: tuple[PositiveInt, ...] = Field(min_length=1)
    distribution: tuple[Share, ...] = Field(min_length=1)
    head_cost: NonNegativeFloat = 0.01
    kv_fill: Literal["copy", "project"] = "copy"
    check_every: PositiveInt | None = None

    @model_validator(mode="after")
    def _a_distribution(self) -> EarlyExitSpec:
        problems = []
        layers, shares = self.exit_layers, self.distribution
        if len(shares) != len(layers):
            problems.append((("distribution",), f"{len(shares)} probabilities for {len(layers)} exit layers: "
                             "give one per exit layer", list(shares)))
        elif not math.isclose(sum(shares), 1.0, abs_tol=1e-6):
            problems.append((("distribution",), f"the probabilities sum to {sum(shares):g}, not 1", list(shares)))
        if any(b <= a for a, b in zip(layers, layers[1:])):
            problems.append((("exit_layers",), "exit layers must increase (each listed once)", list(layers)))
        if problems:
            raise field_errors(type(self), problems)
        return self


class ExitProblem(ValueError):
    """Early exit cannot apply to this instance; ``field`` is the spec field to blame (or ())."""

    def __init__(self, message: str, field: tuple[str, ...] = ()):
        super().__init__(message)
        self.field = field

    def path(self, system: str, system_engine: object) -> tuple[str, ...]:
        """The scenario field to blame: under ``systems.<system>.engine`` if that engine gives
        ``early_exit``, else under the scenario's ``engine``."""
        own = "early_exit" in getattr(system_engine, "model_fields_set", ())
        return (("systems", system, "engine") if own else ("engine",)) + ("early_exit",) + self.field


def exit_problems(spec: EarlyExitSpec, model: ModelSpec) -> ExitProblem | None:
    """What stops ``spec`` from applying to ``model``, or None."""
    if model.moe is not None or model.mla is not None:
        return ExitProblem(f"{model.name} is not a dense GQA model; early exit is modelled for those only")
    if spec.exit_layers[-1] > model.num_layers:
        return ExitProblem(f"exit layer {spec.exit_layers[-1]} is beyond {model.name}'s {model.num_layers} layers "
                           f"(exit_layers count from 1 to {model.num_layers})", ("exit_layers",))
    return None


def exit_sizing(spec: EarlyExitSpec | None, model: ModelSpec, layout: Layout, tp_in_node: bool, dtype: str,
                weight_dtypes: dict[str, str] | None) -> float:
    """The HBM the exit heads take on each card of an instance of ``layout`` (0 without ``spec``).

    Raises
    ------
    ExitProblem
        Where early exit is not modelled (not a dense GQA model; not tensor parallelism inside one
        node, ``tp_in_node``) or an exit layer is beyond the model's.
    """
    if spec is None:
        return 0.0
    problem = exit_problems(spec, model)
    if problem is not None:
        raise problem
    if not (layout.plain_tp and tp_in_node):
        raise ExitProblem(f"early exit is modelled for tensor parallelism inside one node; this instance is "
                          f"{layout.label()}")
    return head_bytes_per_card(spec, model, dtype, weight_dtypes, layout.tp)


def exit_cdf(spec: EarlyExitSpec, layers: int) -> tuple[list[int], list[float]]:
    """The exit layers, with ``layers`` (the model's last) appended if missing, and the per-token
    CDF ``F`` at each (the last exactly 1: a token not exited by then runs to the end)."""
    depths, cdf, total = [], [], 0.0
    for layer, share in zip(spec.exit_layers, spec.distribution):
        total += share
        depths.append(layer)
        cdf.append(min(total, 1.0))
    if depths[-1] != layers:
        depths.append(layers)
        cdf.append(1.0)
    cdf[-1] = 1.0
    return depths, cdf


def deepest_exit(depths: list[int], cdf: list[float], batch: int, u: float) -> int:
    """The depth of a step of ``batch`` tokens for the uniform draw ``u`` in [0, 1): the smallest
    exit layer ``e_i`` with ``F(e_i)^batch >= u`` (inverse CDF of the largest of ``batch`` draws)."""
    level = u ** (1.0 / batch)
    for depth, share in zip(depths, cdf):
        if share >= level:
            return depth
    return depths[-1]


def depth_probabilities(cdf: list[float], batch: int) -> list[float]:
    """``P(depth = e_i) = F_i^b - F_(i-1)^b`` for a step of ``batch`` tokens."""
    powers = [share ** batch for share in cdf]
    return [powers[0]] + [b - a for a, b in zip(powers, powers[1:])]


def expected_depth(spec: EarlyExitSpec, layers: int, batch: int) -> float:
    """Mean layers a step of ``batch`` tokens runs (closed form)."""
    depths, cdf = exit_cdf(spec, layers)
    return sum(d * p for d, p in zip(depths, depth_probabilities(cdf, batch)))


def kv_fill_bytes(tokens: int, skipped_layers: int, kv_bytes_per_token_layer: float) -> float:
    """Bytes of KV written for ``tokens`` tokens' ``skipped_layers`` skipped layers (``copy``)."""
    return tokens * skipped_layers * kv_bytes_per_token_layer


def head_bytes_per_card(spec: EarlyExitSpec, model: ModelSpec, dtype: str, weight_dtypes: dict[str, str] | None,
                        tp: int) -> float:
    """HBM the exit heads take on each card (one per exit layer below the last layer)."""
    heads = sum(1 for layer in spec.exit_layers if layer < model.num_layers)
    return heads * spec.head_cost * layer_bytes_per_card(model, dtype, weight_dtypes, tp)
