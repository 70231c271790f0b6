"""``plan.sensitivity``: which figures a plan's answer is tested against, and over what range.

By default ``kvsim plan`` varies every catalog or scenario figure that its source marks as an
assumption (or unconfirmed) and that the winner or the runner-up at a target depends on (see
:mod:`kvsim.plan.sensitivity_figures` for the rules and the default ranges). A scenario narrows or
widens that::

    plan:
      targets: [8/s]
      sensitivity:
        physics: 1                      # at most one figure that needs probes (default 2; 0: none)
        figures:                        # instead of the figures found: these, with these ranges
          - {field: catalog.nodes.l20-8x.price_usd, low: 70000, high: 140000}
          - field: catalog.accelerators.l20.efficiency.compute   # the default range

or turns it off with ``sensitivity: off``. A field is a dotted path as ``--set`` writes it; ``low``
and ``high`` are numbers in SI units (US dollars for a price) or unit strings (``5 GB/s``).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator

from kvsim.spec_types import FrozenSpec, PositiveFloat

__all__ = ["SensitivitySpec", "FigureRange"]


def _or(*others: dict[str, Any]):
    """A model's JSON Schema that also admits the short forms its ``before`` validator reads (editors
    then accept ``sensitivity: off`` and a bare field path)."""
    def extra(schema: dict[str, Any], cls: type) -> None:
        whole = dict(schema)
        schema.clear()
        schema["anyOf"] = [whole, *others]
        if "description" in whole:
            schema["description"] = whole["description"]
    return extra


_END = Annotated[PositiveFloat, BeforeValidator(lambda value: _si(value)), WithJsonSchema({
    "anyOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "string", "examples": ["70000", "5 GB/s", "2 ms"]}],
    "description": "an SI number (US dollars for a price) or a quantity with its unit"})]


class FigureRange(FrozenSpec):
    """One figure to vary: its field path and, optionally, its range (default: the documented one).

    Attributes
    ----------
    field : str
        Dotted path of the figure (``catalog.nodes.l20-8x.price_usd``, ``engine.step_fixed_s``,
        ``cost.energy_usd_per_kwh``), as ``--set`` writes it.
    low, high : number or str, optional
        The range's ends: SI numbers (US dollars for prices), or unit strings (``5 GB/s``).
    """

    model_config = ConfigDict(**FrozenSpec.model_config,
                              json_schema_extra=_or({"type": "string", "description": "a field path alone"}))

    field: str = Field(min_length=1)
    # every figure varied is positive (a price, a rate, a share); a unit string is read as SI here
    low: _END | None = None
    high: _END | None = None

    @model_validator(mode="before")
    @classmethod
    def _bare_field(cls, data: Any) -> Any:
        return {"field": data} if isinstance(data, str) else data


class SensitivitySpec(FrozenSpec):
    """What ``kvsim plan`` tests its answer against (module docstring).

    Attributes
    ----------
    enabled : bool
        False (``sensitivity: off``): no sensitivity section.
    figures : list of FigureRange, optional
        The figures to vary, instead of those the catalog and scenario mark as assumptions.
    physics : int
        At most this many figures that change capacities (efficiencies, bandwidths, engine
        costs) are re-planned with probes, the first found in :data:`kvsim.plan.sensitivity_figures.PRIORITY`
        order (those listed under ``figures`` always are). Cost figures need no probe.
    """

    model_config = ConfigDict(**FrozenSpec.model_config,
                              json_schema_extra=_or({"enum": ["off", "on"]}, {"type": "boolean"}))

    enabled: bool = True
    figures: list[FigureRange] | None = None
    physics: int = Field(default=2, ge=0, le=16)

    @model_validator(mode="before")
    @classmethod
    def _switch(cls, data: Any) -> Any:
        if data is False or (isinstance(data, str) and data.strip().lower() in ("off", "false", "no")):
            return {"enabled": False}
        if data is True or (isinstance(data, str) and data.strip().lower() in ("on", "true", "yes")):
            return {}
        if data is None:
            return {}
        if isinstance(data, str):
            raise ValueError(f"expected off, on or a mapping (figures, physics), got {data!r}")
        return data


def _si(value: Any) -> Any:
    """A range end as an SI float: a number as given, a unit string in whichever dimension its unit
    names (``5 GB/s`` is bytes/s, ``2 ms`` seconds); anything else as it is, for the type to refuse.

    Raises
    ------
    ValueError
        A text that is no quantity of any dimension (one message, with examples).
    """
    from kvsim.units import DIMENSIONS, UnitError, parse_quantity

    if not isinstance(value, str):
        return value
    for dimension in DIMENSIONS:
        try:
            return parse_quantity(value, dimension)
        except UnitError:  # the next dimension may read it
            continue
    try:
        return float(value.strip())
    except ValueError:
        raise ValueError(f"{value!r} is neither a number nor a quantity with a unit (e.g. 70000, 0.5, 5 GB/s, "
                         f"2 ms)") from None
