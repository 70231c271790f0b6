"""Cost model: what a system costs per hour, and per token or request at the load it served.

A system's hourly cost is its capital cost spread evenly over the amortisation period, plus the
energy its servers draw (IT power x PUE x energy price), plus any other running cost per node::

    capex_usd           = sum over compute pools of nodes x price_usd
                          + remote_pool_share x pool nodes x price_usd
    it_power_w          = sum over compute pools of nodes x (cards per node x card draw + host_power_w)
                          + remote_pool_share x pool nodes x power_w
    capex_per_hour_usd  = capex_usd / (amortisation_s / 3600)
    energy_per_hour_usd = it_power_w x pue / 1000 x energy_usd_per_kwh
    opex_per_hour_usd   = nodes charged x opex_usd_per_node_year / 8760
    rent_per_hour_usd   = rented pool nodes x capacity_bytes / 1e12 x usd_per_tb_month / 730
    cost_per_hour_usd   = capex_per_hour_usd + energy_per_hour_usd + opex_per_hour_usd + rent_per_hour_usd

A remote KV pool priced per TB-month (a cloud pool, ``plan.shared_pools``,
:mod:`kvsim.scenario.shared_pool_spec`) is rented, not bought: its line has no price, power or
running cost of its own (the provider's), only the rent (TB = 1e12 bytes, a month = 730 h).

A card draws ``typical_power_w`` where the catalog states one, else ``tdp_w`` (an upper bound).
Every node of a pool is paid for and powered, also cards no instance uses. From a run's summary:

    usd_per_million_output_tokens = cost_per_hour_usd / (output tokens/s x 3600) x 1e6
    usd_per_million_prompt_tokens = cost_per_hour_usd / (prompt tokens/s x 3600) x 1e6
    goodput_requests_per_usd      = goodput requests/s x 3600 / cost_per_hour_usd

Each is the whole system's cost charged to that one stream (not split between prompt and output).
A figure that needs an unknown price or power, or divides by a zero rate, is None, never NaN or
infinity. See ``docs/cost.md`` for the defaults and their sources.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvsim.scenario.cost_spec import HOUR_S, HOURS_PER_YEAR, CostSpec
from kvsim.scenario.shared_pool_spec import HOURS_PER_MONTH, TB_BYTES

if TYPE_CHECKING:  # the cost model reads a sizing; it never builds one
    from kvsim.hardware.specs import AcceleratorSpec, NodeSpec, PoolNodeSpec
    from kvsim.sim.sizing import SystemSizing

__all__ = [
    "BillLine", "bill_of_materials", "pool_rent_usd_per_hour", "line_cost_per_hour_usd", "capex_per_hour_usd", "energy_per_hour_usd", "opex_per_hour_usd",
    "usd_per_million_tokens", "requests_per_usd", "cost_summary", "OUTPUT_TOKENS_KEYS", "PROMPT_TOKENS_KEYS",
    "GOODPUT_KEYS",
]

OUTPUT_TOKENS_KEYS = ("output_tokens_per_s",)
"""Summary keys (:mod:`kvsim.metrics.summary`) read for output tokens per second, first present wins."""
PROMPT_TOKENS_KEYS = ("prompt_tokens_per_s", "input_tokens_per_s")
"""Summary keys read for prompt tokens per second, first present wins."""
GOODPUT_KEYS = ("goodput_requests_per_s",)
"""Summary keys read for requests per second that met the SLO, first present wins."""


@dataclass(frozen=True)
class BillLine:
    """One kind of machine in a system: how many, what one costs and draws, what is assumed.

    Attributes
    ----------
    label : str
        Where it sits: ``pool main: h20-8x`` or ``kv pool: nvme-storage-16x``.
    part : str
        Catalog name of the node or pool node.
    count : int
        Machines of this kind.
    share : float
        Fraction of them charged to the system (``CostSpec.remote_pool_share`` for a remote pool,
        else 1).
    price_usd : float or None
        Price of one machine, US dollars (None: unknown).
    power_w : float or None
        Average draw of one machine, accelerators included, watts (None: unknown).
    assumptions : tuple of str
        Figures behind ``price_usd`` and ``power_w`` that are assumptions, each with its reasoning.
    unknown : tuple of str
        Figures that are missing, so the totals that need them are None.
    kind : str
        ``compute`` (a pool's servers) or ``kv_pool`` (the remote KV pool's nodes).
    rent_usd_per_hour : float or None
        Rent of one machine, US dollars per hour, for a rented line (a pool priced per TB-month,
        whose ``price_usd`` and ``power_w`` are then 0: nothing bought, nothing drawn at the
        facility's meter); None for a bought one.
    """

    label: str
    part: str
    count: int
    share: float
    price_usd: float | None
    power_w: float | None
    assumptions: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    kind: str = "compute"
    rent_usd_per_hour: float | None = None


def _assumed(what: str, value: str, source: str | None) -> list[str]:
    """``[what = value: source]`` when the source marks the figure as an assumption, else ``[]``."""
    if source is not None and "assumption" in source.lower():
        return [f"{what} = {value}: {source}"]
    return []


def _card_draw(accelerator: AcceleratorSpec) -> tuple[float | None, list[str], list[str]]:
    """Average draw of one card (watts), what is assumed about it, what is missing."""
    sources = accelerator.sources
    if accelerator.typical_power_w is not None:
        value = accelerator.typical_power_w
        return value, _assumed(f"card {accelerator.name} typical_power_w", f"{value:g} W",
                               sources.get("typical_power_w")), []
    if accelerator.tdp_w is None:
        return None, [], [f"card {accelerator.name}: neither typical_power_w nor tdp_w"]
    assumed = [f"card {accelerator.name} draws its TDP, {accelerator.tdp_w:g} W, while serving (no typical figure; "
               "an upper bound)"]
    return accelerator.tdp_w, assumed + _assumed(f"card {accelerator.name} tdp_w", f"{accelerator.tdp_w:g} W",
                                                 sources.get("tdp_w")), []


def _price(family: str, spec: NodeSpec | PoolNodeSpec) -> tuple[list[str], list[str]]:
    if spec.price_usd is None:
        return [], [f"{family} {spec.name}: price_usd"]
    value = f"USD {spec.price_usd:,.0f} ({spec.price_date})"
    return _assumed(f"{family} {spec.name} price_usd", value, spec.sources.get("price_usd")), []


def bill_of_materials(sizing: SystemSizing, remote_pool_share: float = 1.0,
                      pool_usd_per_tb_month: float | None = None) -> tuple[BillLine, ...]:
    """The machines a system is built of: each compute pool's servers, and the remote KV pool's nodes.

    Parameters
    ----------
    sizing : SystemSizing
        The sized system (:func:`kvsim.sim.sizing.size_system`).
    remote_pool_share : float
        Fraction of the remote pool's nodes charged to the system, in (0, 1].
    pool_usd_per_tb_month : float, optional
        Rent the remote pool instead of buying it: US dollars per TB-month of its capacity
        (TB = 1e12 bytes, month = 730 h); its line then carries ``rent_usd_per_hour``.

    Returns
    -------
    tuple of BillLine
        One line per compute pool, then one for the remote pool's nodes if the system has one.
    """
    lines = []
    for pool in sizing.pools:
        node, card = pool.node, pool.accelerator
        assumed, unknown = _price("node", node)
        draw, card_assumed, card_unknown = _card_draw(card)
        host = node.host_power_w
        if host is None:
            unknown.append(f"node {node.name}: host_power_w")
        else:
            assumed += _assumed(f"node {node.name} host_power_w", f"{host:g} W", node.sources.get("host_power_w"))
        power = None if draw is None or host is None else node.accelerators_per_node * draw + host
        lines.append(BillLine(f"pool {pool.name}: {node.name}", node.name, pool.spec.nodes, 1.0, node.price_usd, power,
                              tuple(assumed + card_assumed), tuple(unknown + card_unknown)))
    cache = sizing.spec.kv_cache
    if sizing.pool_node is not None and cache is not None and cache.remote is not None:
        pool_node = sizing.pool_node
        if pool_usd_per_tb_month is not None:
            rent = pool_rent_usd_per_hour(pool_node.capacity_bytes, pool_usd_per_tb_month)
            lines.append(BillLine(f"kv pool (rented): {pool_node.name}", pool_node.name, cache.remote.nodes,
                                  remote_pool_share, 0.0, 0.0, (), (), "kv_pool", rent))
            return tuple(lines)
        assumed, unknown = _price("pool node", pool_node)
        if pool_node.power_w is None:
            unknown.append(f"pool node {pool_node.name}: power_w")
        else:
            assumed += _assumed(f"pool node {pool_node.name} power_w", f"{pool_node.power_w:g} W",
                                pool_node.sources.get("power_w"))
        lines.append(BillLine(f"kv pool: {pool_node.name}", pool_node.name, cache.remote.nodes, remote_pool_share,
                              pool_node.price_usd, pool_node.power_w, tuple(assumed), tuple(unknown), "kv_pool"))
    return tuple(lines)


def pool_rent_usd_per_hour(capacity_bytes: float, usd_per_tb_month: float) -> float:
    """Rent of one pool node of ``capacity_bytes`` at ``usd_per_tb_month`` (US dollars per TB of
    capacity per month; TB = 1e12 bytes, month = 730 h), US dollars per hour."""
    return capacity_bytes / TB_BYTES * usd_per_tb_month / HOURS_PER_MONTH


def capex_per_hour_usd(capex_usd: float, amortisation_s: float) -> float:
    """Capital cost spread evenly over the amortisation period.

    Parameters
    ----------
    capex_usd : float
        Purchase price of the whole system, US dollars.
    amortisation_s : float
        Amortisation period, seconds (> 0).

    Returns
    -------
    float
        US dollars per hour (straight line, no residual value, no cost of capital).
    """
    return capex_usd / (amortisation_s / HOUR_S)


def energy_per_hour_usd(it_power_w: float, pue: float, energy_usd_per_kwh: float) -> float:
    """Cost of the energy a system draws, cooling and power distribution included.

    Parameters
    ----------
    it_power_w : float
        Average draw of the servers, watts.
    pue : float
        Power usage effectiveness: facility power / IT power (>= 1).
    energy_usd_per_kwh : float
        Electricity price, US dollars per kWh.

    Returns
    -------
    float
        US dollars per hour: kW drawn at the facility meter x price per kWh.
    """
    return it_power_w * pue / 1000.0 * energy_usd_per_kwh


def opex_per_hour_usd(nodes: float, opex_usd_per_node_year: float) -> float:
    """Other running cost of ``nodes`` machines (a fraction where a pool is shared), US dollars
    per hour (a year is 8,760 h)."""
    return nodes * opex_usd_per_node_year / HOURS_PER_YEAR


def _rate(value: Any) -> float | None:
    """A finite rate from a summary value (a number, or a mapping with a ``mean``), else None."""
    if isinstance(value, Mapping):
        value = value.get("mean")
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def usd_per_million_tokens(cost_per_hour_usd: float | None, tokens_per_s: float | None) -> float | None:
    """Dollars per million tokens when ``tokens_per_s`` are served at ``cost_per_hour_usd``.

    Returns None when the cost is unknown or no token was served (rather than infinity).
    """
    if cost_per_hour_usd is None or tokens_per_s is None or not tokens_per_s > 0:
        return None
    return cost_per_hour_usd / (tokens_per_s * HOUR_S) * 1e6


def requests_per_usd(cost_per_hour_usd: float | None, requests_per_s: float | None) -> float | None:
    """Requests served per dollar at ``requests_per_s``; None when the cost is unknown or zero."""
    if cost_per_hour_usd is None or requests_per_s is None or not cost_per_hour_usd > 0:
        return None
    return requests_per_s * HOUR_S / cost_per_hour_usd


def _read(summary: Mapping[str, Any], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        if key in summary:
            return _rate(summary[key])
    raise KeyError(f"the summary has none of {', '.join(keys)} (kvsim.metrics.summary)")


def _model_assumptions(spec: CostSpec, remote_pool: bool) -> list[str]:
    """The cost model's own defaults that the scenario left as they are (and that apply).

    A field counts as left at its default when its value equals the default, whether or not the
    file wrote it: a resolved scenario (``scenario.yaml``, every field explicit) then names the
    same assumptions as the file it came from."""
    defaults = CostSpec()
    given = {name for name in CostSpec.model_fields if getattr(spec, name) != getattr(defaults, name)}
    if not remote_pool:
        given.add("remote_pool_share")
    texts = {
        "amortisation": f"amortisation = {spec.amortisation / HOUR_S / HOURS_PER_YEAR:g} years (default): straight "
                        "line, no residual value; clouds depreciate servers over 5-6 years since 2022, accelerators "
                        "age faster",
        "pue": f"pue = {spec.pue:g} (default): between hyperscale sites (1.1-1.2) and the 2023 industry average "
               "1.58 (Uptime Institute)",
        "energy_usd_per_kwh": f"energy_usd_per_kwh = {spec.energy_usd_per_kwh:g} (default): between US industrial "
                              "(~7-9 cents) and commercial (~10-21 cents) tariffs of 2024 (EIA)",
        "opex_usd_per_node_year": f"opex_usd_per_node_year = {spec.opex_usd_per_node_year:g} (default): no support, "
                                  "space or staff cost counted",
        "remote_pool_share": f"remote_pool_share = {spec.remote_pool_share:g} (default): the whole remote KV pool is "
                             "charged to the system",
    }
    return [text for field, text in texts.items() if field not in given]


def line_cost_per_hour_usd(line: BillLine, cost_spec: CostSpec) -> float | None:
    """What one bill line costs per hour: its charged machines' capital, energy and other running
    cost (the terms of ``cost_per_hour_usd`` restricted to them), US dollars per hour.

    The lines' costs add up to the system's ``cost_per_hour_usd`` (to rounding): a study can
    then price a system with or without the KV pool bought for it. None where the line's price
    or power is unknown.
    """
    charged = line.count * line.share
    if line.rent_usd_per_hour is not None:
        return charged * line.rent_usd_per_hour
    if line.price_usd is None or line.power_w is None:
        return None
    return (capex_per_hour_usd(charged * line.price_usd, cost_spec.amortisation)
            + energy_per_hour_usd(charged * line.power_w, cost_spec.pue, cost_spec.energy_usd_per_kwh)
            + opex_per_hour_usd(charged, cost_spec.opex_usd_per_node_year))


def _total(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return None if len(known) < len(values) else float(sum(known))


def cost_summary(sizing: SystemSizing, summary: Mapping[str, Any], cost_spec: CostSpec,
                 pool_usd_per_tb_month: float | None = None) -> dict[str, Any]:
    """The cost figures of one system at the load it served, as plain JSON-able values.

    Parameters
    ----------
    sizing : SystemSizing
        The sized system (:func:`kvsim.sim.sizing.size_system`).
    summary : mapping
        The system's run summary (:func:`kvsim.metrics.summary.summarize`): read are output
        tokens/s, prompt tokens/s and goodput requests/s (see ``*_KEYS``; a value may be a
        number or a mapping with a ``mean``).
    cost_spec : CostSpec
        The scenario's ``cost:`` section.
    pool_usd_per_tb_month : float, optional
        Rent the remote pool per TB-month instead of buying it (:func:`bill_of_materials`).

    Returns
    -------
    dict
        ``capex_usd``, ``it_power_w``, ``facility_power_w``, ``capex_per_hour_usd``,
        ``energy_per_hour_usd``, ``opex_per_hour_usd``, ``rent_per_hour_usd`` (0 unless the pool
        is rented), ``cost_per_hour_usd``,
        ``usd_per_million_output_tokens``, ``usd_per_million_prompt_tokens``,
        ``goodput_requests_per_usd`` (floats; None where a price or power is unknown or a rate
        is zero), ``nodes_charged`` (machines charged, pool nodes included, a fraction where a pool is
        shared), the model parameters used (``amortisation_h``, ``pue``, ``energy_usd_per_kwh``,
        ``opex_usd_per_node_year``, ``remote_pool_share``),
        ``bill`` (one entry per kind of machine), ``assumptions`` (every assumed figure used,
        with its reasoning) and ``unknown`` (every missing figure).

    Raises
    ------
    KeyError
        If the summary has none of the keys of a rate it needs.
    """
    lines = bill_of_materials(sizing, cost_spec.remote_pool_share, pool_usd_per_tb_month)
    rent_hour = sum(line.count * line.share * line.rent_usd_per_hour for line in lines
                    if line.rent_usd_per_hour is not None)
    nodes = sum(line.count * line.share for line in lines if line.rent_usd_per_hour is None)  # rent covers the rest
    capex = _total([None if line.price_usd is None else line.count * line.share * line.price_usd for line in lines])
    it_power = _total([None if line.power_w is None else line.count * line.share * line.power_w for line in lines])
    capex_hour = None if capex is None else capex_per_hour_usd(capex, cost_spec.amortisation)
    energy_hour = None if it_power is None else energy_per_hour_usd(it_power, cost_spec.pue,
                                                                    cost_spec.energy_usd_per_kwh)
    opex_hour = opex_per_hour_usd(nodes, cost_spec.opex_usd_per_node_year)
    cost_hour = _total([capex_hour, energy_hour, opex_hour, rent_hour])
    assumptions = _model_assumptions(cost_spec, remote_pool=sizing.pool_node is not None)
    unknown: list[str] = []
    for line in lines:
        assumptions += [a for a in line.assumptions if a not in assumptions]
        unknown += [u for u in line.unknown if u not in unknown]
    return {
        "capex_usd": capex,
        "it_power_w": it_power,
        "facility_power_w": None if it_power is None else it_power * cost_spec.pue,
        "capex_per_hour_usd": capex_hour,
        "energy_per_hour_usd": energy_hour,
        "opex_per_hour_usd": opex_hour,
        "rent_per_hour_usd": rent_hour,
        "cost_per_hour_usd": cost_hour,
        "usd_per_million_output_tokens": usd_per_million_tokens(cost_hour, _read(summary, OUTPUT_TOKENS_KEYS)),
        "usd_per_million_prompt_tokens": usd_per_million_tokens(cost_hour, _read(summary, PROMPT_TOKENS_KEYS)),
        "goodput_requests_per_usd": requests_per_usd(cost_hour, _read(summary, GOODPUT_KEYS)),
        "nodes_charged": nodes,
        "amortisation_h": cost_spec.amortisation / HOUR_S,
        "pue": cost_spec.pue,
        "energy_usd_per_kwh": cost_spec.energy_usd_per_kwh,
        "opex_usd_per_node_year": cost_spec.opex_usd_per_node_year,
        "remote_pool_share": cost_spec.remote_pool_share,
        "bill": [{"label": line.label, "part": line.part, "count": line.count, "share": line.share,
                  "price_usd": line.price_usd, "power_w": line.power_w,
                  "kind": line.kind,
                  **({} if line.rent_usd_per_hour is None else {"rent_usd_per_hour": line.rent_usd_per_hour}),
                  "cost_per_hour_usd": line_cost_per_hour_usd(line, cost_spec)} for line in lines],
        "assumptions": assumptions,
        "unknown": unknown,
    }
