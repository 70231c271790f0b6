"""The ``cost:`` section of a scenario: how capital and running costs turn into dollars per hour.

The part prices and power figures themselves live in the hardware catalog (``price_usd``,
``price_date``, ``tdp_w``, ``host_power_w``, ``power_w``; a scenario overrides them under
``catalog:``); this section holds the parameters of the cost model in :mod:`kvsim.metrics.cost`.
The spec lives beside the schema, not in ``plan/``, so the scenario layer imports nothing above it.
"""

from __future__ import annotations

from pydantic import Field

from kvsim.spec_types import Fraction, FrozenSpec, PositiveSeconds

__all__ = ["CostSpec", "HOUR_S", "YEAR_S", "HOURS_PER_YEAR"]

HOUR_S = 3600.0
HOURS_PER_YEAR = 8760.0
"""A 365-day year, as ``"1 year"`` reads in :mod:`kvsim.units`."""
YEAR_S = HOURS_PER_YEAR * HOUR_S


class CostSpec(FrozenSpec):
    """Parameters of the cost model; every default is an assumption the cost summary names.

    Attributes
    ----------
    amortisation : float
        Period over which capital cost is spread evenly (straight line, no residual value, no
        cost of capital), seconds; written ``"4 years"`` or ``"35040 h"`` in the file.
    pue : float
        Power usage effectiveness: facility power / IT power (>= 1); cooling and power
        distribution on top of what the servers draw.
    energy_usd_per_kwh : float
        Price of electricity, US dollars per kWh.
    opex_usd_per_node_year : float
        Other running cost per server (compute and pool nodes alike): support contract, rack
        space, operations staff, US dollars per node per year.
    remote_pool_share : float
        Share of a remote KV pool's nodes charged to the system (capital, power and opex), in
        (0, 1]: 1 when the pool serves this system alone, less when the simulated system stands
        for a slice of a larger fleet that shares one pool.

    Defaults (ASSUMPTIONS, see ``docs/cost.md``): 4 years, between the 3-4 years over which the
    large clouds depreciated servers until 2020-22 and the 5-6 years they use since (Microsoft,
    Alphabet 6, Amazon 5-6, Meta 5: their 10-K/10-Q filings as quoted by datacenterdynamics.com
    and shaulkoral.com, M), shortened because accelerators age faster than CPU servers; PUE 1.3,
    between hyperscale sites (1.1-1.2) and the industry average of 1.58 in 2023 (Uptime
    Institute Global Data Center Survey, M); USD 0.10/kWh, between US industrial tariffs (6.8-9.2
    cents/kWh in the Midwest and Mid-Atlantic states, 16.3 in New England, year to July 2024: EIA
    Electric Power Monthly table 5.6.B, H) and commercial ones (10-21 cents there); no other opex; the whole remote pool charged (share 1).
    """

    amortisation: PositiveSeconds = 4 * YEAR_S
    pue: float = Field(default=1.3, ge=1.0)  # facility over IT power: never below 1
    energy_usd_per_kwh: float = Field(default=0.10, ge=0.0)  # 0: power is free (a what-if)
    opex_usd_per_node_year: float = Field(default=0.0, ge=0.0)
    remote_pool_share: Fraction = 1.0
