"""Weight offload: part of a model's layers kept in host DRAM and streamed to the card every
iteration, overlapped with the layers before them (issue 28 item 1).

It pays only when the HBM it frees changes the deployment -- room for more KV, or a model on
fewer cards -- and every iteration pays the host link for it (SemiAnalysis's argument; FlexEE,
arXiv:2609.17008, measures the gain of early exit growing with the offloaded share because it
saves this movement). kvsim keeps the *last* ``k`` of the model's ``L`` layers on the host
(``instance.weight_offload.fraction``: ``k = round(fraction x L)``, at least one), their weights
split over the instance's ``tp`` cards like the rest. Each iteration streams them over each
card's host link at ``host_link_bandwidth x efficiency.host_copy``, one layer in ``tau`` seconds,
into ``buffer_layers`` layer-sized buffers in HBM (two by default: one arriving while the other is
computed), starting as the iteration starts, while the resident layers compute.

Step time. With ``x`` the iteration's roofline (``max(compute, memory)``, the GPU's own time) and
``c = x / L`` one layer's share of it, the offloaded layers end no earlier than their transfers
allow (a two-stage pipeline: transfer, then compute)::

    stream_s = k * tau + c          (the transfers back to back, then the last layer's compute)
    fill_s   = tau + k * c          (the first transfer, then the offloaded layers' compute)
    memory_s (offloaded) = max(memory_s, stream_s, fill_s)

so the iteration is ``max(compute, memory, stream, fill) + collectives + launches + host``: the
transfers' time counts as the memory phase (bringing the weights to the cores), and when they are
shorter than the layers before them they are hidden. With double buffering the transfer of a
layer waits for the buffer of the layer two back, which never binds in either regime (``tau >=
c``: transfers are the pace; ``tau < c``: they run ahead of the compute they feed). The HBM
freed is ``(k - buffer_layers) x`` one layer's bytes per card; host DRAM must hold every offloaded
byte of the node's instances.

Not modelled yet: dense models only (an MoE model's cold experts, offloaded first, are the other
case the issue names); tensor parallelism inside one node only (no pipeline, expert or attention
data parallelism); the stream does not share the host link with KV traffic through the flow
network (it is charged in the step time, and the link's KV flows see the link as before).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from kvsim.dtypes import DTYPE_BYTES
from kvsim.hardware.specs import AcceleratorSpec, NodeSpec
from kvsim.models.llm import ModelSpec
from kvsim.models.parallel import Layout, layer_params
from kvsim.spec_types import Fraction, FrozenSpec, PositiveInt
from kvsim.units import format_quantity

__all__ = ["WeightOffloadSpec", "WeightStream", "offloaded_layers", "layer_bytes_per_card", "weight_stream",
           "offload_sizing"]


class WeightOffloadSpec(FrozenSpec):
    """``instance.weight_offload``: which share of the layers lives in host DRAM.

    Attributes
    ----------
    fraction : float
        Share of the model's decoder layers kept in host DRAM and streamed each iteration
        (rounded to whole layers, at least one; the last layers), between 0 and 1 exclusive.
    buffer_layers : int
        Layer-sized buffers in HBM the streamed weights land in (default 2: double buffering).
    """

    fraction: Fraction = Field(gt=0.0, lt=1.0)
    buffer_layers: PositiveInt = 2


def offloaded_layers(model: ModelSpec, fraction: float) -> int:
    """Decoder layers kept on the host: ``round(fraction x L)``, at least 1, at most ``L``."""
    return min(model.num_layers, max(1, round(fraction * model.num_layers)))


def layer_bytes_per_card(model: ModelSpec, dtype: str, weight_dtypes: dict[str, str] | None, tp: int) -> float:
    """Weight bytes of one decoder layer on each of ``tp`` cards (attention, its norms and the
    feed-forward, in their storage formats)."""
    if model.moe is not None:
        raise ValueError("weight offload is modelled for dense models only")
    formats = weight_dtypes or {}
    attention, ffn, _ = layer_params(model)
    total = (attention * DTYPE_BYTES[formats.get("attention", dtype)]
             + ffn * DTYPE_BYTES[formats.get("feed_forward", dtype)])
    return total / model.num_layers / tp


@dataclass(frozen=True)
class WeightStream:
    """The offloaded layers of one instance, as the step-time model uses them
    (:func:`kvsim.models.step_time.streamed_memory_s` applies the module docstring's bound).

    Attributes
    ----------
    layers : int
        ``L``, the model's decoder layers.
    offloaded : int
        ``k``, those streamed from the host each iteration.
    layer_s : float
        ``tau``, one offloaded layer's transfer over a card's host link, seconds.
    """

    layers: int
    offloaded: int
    layer_s: float


def weight_stream(spec: WeightOffloadSpec, model: ModelSpec, accelerator: AcceleratorSpec, dtype: str,
                  weight_dtypes: dict[str, str] | None, tp: int) -> WeightStream:
    """The stream of ``spec``'s offloaded layers onto each card of a ``tp``-card instance."""
    rate = accelerator.host_link_bandwidth * accelerator.efficiency.host_copy
    return WeightStream(layers=model.num_layers, offloaded=offloaded_layers(model, spec.fraction),
                        layer_s=layer_bytes_per_card(model, dtype, weight_dtypes, tp) / rate)


def offload_sizing(spec: WeightOffloadSpec, model: ModelSpec, node: NodeSpec, accelerator: AcceleratorSpec,
                   layout: Layout, dtype: str, weight_dtypes: dict[str, str] | None,
                   dram_tier_bytes: float = 0.0) -> tuple[WeightStream, float]:
    """The stream of an instance's offloaded layers and the HBM it frees on each card.

    Raises
    ------
    ValueError
        Where it is not modelled (an MoE model; a layout other than tensor parallelism inside one
        node) or the node's host DRAM, beside a DRAM KV tier of ``dram_tier_bytes``, cannot hold
        every offloaded byte of its cards; the message says what to change.
    """
    if model.moe is not None:
        raise ValueError(f"{model.name} is a mixture of experts; weight offload is modelled for dense models only "
                         "(offloading cold experts first is not yet)")
    if not layout.plain_tp or layout.cards > node.accelerators_per_node:
        raise ValueError(f"weight offload is modelled for tensor parallelism inside one node; this instance is "
                         f"{layout.label()} on {node.name}")
    stream = weight_stream(spec, model, accelerator, dtype, weight_dtypes, layout.tp)
    per_layer = layer_bytes_per_card(model, dtype, weight_dtypes, layout.tp)
    host_bytes = stream.offloaded * per_layer * node.accelerators_per_node  # every card of the node streams
    if host_bytes + dram_tier_bytes > node.host_dram_bytes:
        raise ValueError(f"{stream.offloaded} of {model.num_layers} layers on the host take "
                         f"{format_quantity(host_bytes, 'bytes')} of node {node.name}'s host DRAM "
                         + (f"beside the {format_quantity(dram_tier_bytes, 'bytes')} KV tier " if dram_tier_bytes else "")
                         + f"({format_quantity(node.host_dram_bytes, 'bytes')}): lower the fraction")
    return stream, max(0, stream.offloaded - spec.buffer_layers) * per_layer
