"""Building blocks for immutable, validated ``*Spec`` objects.

Specs are plain data (pydantic models, frozen, unknown keys refused). Fields that carry a
physical quantity accept a unit string at the YAML boundary and hold an SI float afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializationInfo,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from kvsim.units import DIMENSIONS, EXAMPLES, parse_quantity, quantity_pattern

__all__ = [
    "FrozenSpec", "Bytes", "PositiveBytes", "Bandwidth", "Seconds", "PositiveSeconds", "Rate", "FlopRate", "Watts",
    "PositiveFloat", "NonNegativeFloat", "Fraction", "Share", "PositiveInt", "Count", "STRICT_UNITS", "WITH_UNITS",
    "field_errors",
]


class FrozenSpec(BaseModel):
    """Base of every spec: immutable, strict about unknown keys, no side effects."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, allow_inf_nan=False)


STRICT_UNITS = "strict_units"
"""Validation-context key: set it for text read from files, where a bare number is refused."""


def _quantity(dimension: str) -> BeforeValidator:
    def convert(value: object, info: ValidationInfo) -> object:
        from_file = bool(info.context and info.context.get(STRICT_UNITS))
        if not from_file and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)  # Python callers pass SI numbers directly
        return parse_quantity(value, dimension)

    return BeforeValidator(convert)


def _schema(dimension: str) -> WithJsonSchema:
    """How a scenario file writes the quantity, for the JSON Schema (``kvsim schema``): a string
    with its unit, never a bare number (Python callers may pass SI floats; files may not), and
    never negative (every quantity type here refuses values below zero)."""
    units = "SI" if dimension not in DIMENSIONS else DIMENSIONS[dimension].si_unit
    return WithJsonSchema({
        "type": "string", "pattern": quantity_pattern(dimension, signed=False), "examples": EXAMPLES[dimension],
        "description": f"a {dimension} quantity with its unit, e.g. {' or '.join(EXAMPLES[dimension])} "
                       f"(held as {units})",
    }, mode="validation")


def _non_negative(value: float) -> float:
    if not value >= 0:  # also refuses NaN
        raise ValueError(f"must not be negative (got {value:g})")
    return value


def _positive(value: float) -> float:
    if not value > 0:
        raise ValueError(f"must be positive (got {value:g})")
    return value


def _fraction(value: float) -> float:
    if not 0 < value <= 1:
        raise ValueError(f"must be in (0, 1] (got {value:g})")
    return value


def _share(value: float) -> float:
    if not 0 <= value <= 1:
        raise ValueError(f"must be in [0, 1] (got {value:g})")
    return value


def _bounds(**bounds: float) -> WithJsonSchema:
    """The JSON Schema of a unitless number in a range (``kvsim schema``): editors show the range."""
    return WithJsonSchema({"type": "number", **bounds}, mode="validation")


def field_errors(model: type[BaseModel],
                 problems: Sequence[tuple[tuple[str | int, ...], str, object]]) -> ValidationError:
    """A :class:`~pydantic.ValidationError` whose errors sit at the given fields of ``model``.

    A model validator raises it to blame the field at fault, not the whole model: a ``ValueError``
    raised there is reported at the model's own path, so the file's line would be the entry's,
    not the field's. Pydantic prefixes the locations with the model's own path when the model is
    nested (``catalog.models.NAME.moe.first_dense_layers``).

    Parameters
    ----------
    model : type
        The model being validated (its name titles the error).
    problems : sequence of (field path, message, value)
        The field path below ``model``, what is wrong with it, and the value found there.
    """
    return ValidationError.from_exception_data(model.__name__, [
        InitErrorDetails(type=PydanticCustomError("value_error", "{message}", {"message": message}),
                         loc=tuple(path), input=value)
        for path, message, value in problems])


WITH_UNITS = "with_units"
"""Serialization-context key: dump quantities as SI unit strings (``"300.0 s"``) that a scenario
file accepts back, instead of bare floats."""


def _si(unit: str) -> PlainSerializer:
    def dump(value: float, info: SerializationInfo) -> float | str:
        if info.context and info.context.get(WITH_UNITS):
            return f"{float(value)!r} {unit}"
        return float(value)

    return PlainSerializer(dump)


Bytes = Annotated[float, _quantity("bytes"), _schema("bytes"), AfterValidator(_non_negative), _si("B")]
"""Bytes: ``"96 GiB"``, ``"48 GB"``, ``"512 B"``. In a file the unit is required (a bare number
or a bit unit is refused); Python callers pass a float of bytes."""
PositiveBytes = Annotated[float, _quantity("bytes"), _schema("bytes"), AfterValidator(_positive), _si("B")]
"""Bytes that must be above zero (a capacity, a size of one I/O)."""
Bandwidth = Annotated[float, _quantity("bandwidth"), _schema("bandwidth"), AfterValidator(_positive),
                     _si("B/s")]
"""Bytes per second: ``"4 TB/s"``, ``"400 Gbit/s"``."""
Seconds = Annotated[float, _quantity("time"), _schema("time"), AfterValidator(_non_negative), _si("s")]
"""Seconds: ``"300 s"``, ``"50 ms"``, ``"3 us"``."""
PositiveSeconds = Annotated[float, _quantity("time"), _schema("time"), AfterValidator(_positive),
                           _si("s")]
"""Seconds that must be above zero (a duration, a period, a timeout)."""
Rate = Annotated[float, _quantity("rate"), _schema("rate"), AfterValidator(_positive), _si("/s")]
"""Events per second: ``"20/s"``."""
FlopRate = Annotated[float, _quantity("flops"), _schema("flops"), AfterValidator(_positive),
                    _si("FLOP/s")]
"""FLOP per second: ``"148 TFLOPS"``."""
Watts = Annotated[float, _quantity("power"), _schema("power"), AfterValidator(_positive), _si("W")]
PositiveFloat = Annotated[float, AfterValidator(_positive), _bounds(exclusiveMinimum=0)]
"""A unitless number above zero (a scale, a gain, a shape parameter)."""
NonNegativeFloat = Annotated[float, AfterValidator(_non_negative), _bounds(minimum=0)]
"""A unitless number that may be zero (a weight, an exponent where 0 is uniform, a token count)."""
Fraction = Annotated[float, AfterValidator(_fraction), _bounds(exclusiveMinimum=0, maximum=1)]
"""A share in (0, 1] where zero is meaningless (an efficiency, a memory utilisation)."""
Share = Annotated[float, AfterValidator(_share), _bounds(minimum=0, maximum=1)]
"""A share in [0, 1] (a hit ratio, a credit, an attainment or occupancy threshold)."""
PositiveInt = Annotated[int, Field(ge=1)]
"""A count of at least one (instances, layers, heads, slots)."""
Count = Annotated[int, Field(ge=0)]
"""A count that may be zero (drives, NICs, copy threads, shared experts)."""
