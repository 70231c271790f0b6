"""Named families of specs (accelerators, nodes, models) shipped as YAML inside the package.

A :class:`Catalog` maps a name to a validated, immutable spec. A scenario may add entries or
override fields of shipped ones; an entry with ``base: NAME`` starts from that entry's fields::

    catalog:
      accelerators:
        h20-slow: {base: h20, memory_bandwidth: 3 TB/s}
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from importlib import resources
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from kvsim.spec_types import STRICT_UNITS
from kvsim.yaml_io import Located, Path, SpecError, did_you_mean, errors_from_validation, load_yaml

__all__ = ["Catalog", "load_packaged", "deep_merge"]

SpecT = TypeVar("SpecT", bound=BaseModel)


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``base`` with ``update`` merged in, nested mappings merged key by key."""
    merged = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


@dataclass(frozen=True)
class Catalog(Generic[SpecT]):
    """Validated specs of one family, by name, plus the raw fields they were built from."""

    family: str
    spec_type: type[SpecT]
    raw: dict[str, dict[str, Any]]
    specs: dict[str, SpecT]

    def __contains__(self, name: str) -> bool:
        return name in self.specs

    def __getitem__(self, name: str) -> SpecT:
        return self.specs[name]

    def names(self) -> list[str]:
        return sorted(self.specs)

    def unknown_message(self, name: str) -> str:
        return f"unknown {self.family} {name!r}{did_you_mean(name, self.names())}; known: {', '.join(self.names())}"

    def extended(self, entries: dict[str, Any], located: Located, prefix: Path) -> Catalog[SpecT]:
        """A catalog with ``entries`` (from a scenario) added or layered over shipped ones."""
        raw = dict(self.raw)
        specs = dict(self.specs)
        problems: list[str] = []
        for name, fields in entries.items():
            path = prefix + (name,)
            if not isinstance(fields, dict):
                problems.append(located.problem(path, "expected a mapping of fields"))
                continue
            fields = dict(fields)
            base_name = fields.pop("base", None)
            if base_name is not None:
                if not isinstance(base_name, str):  # a list or a mapping cannot even be looked up
                    problems.append(located.problem(path + ("base",), (
                        f"expected the name of a catalog entry to start from, got {type(base_name).__name__} "
                        f"{base_name!r}")))
                    continue
                if base_name not in raw:
                    problems.append(located.problem(path + ("base",), self.unknown_message(base_name)))
                    continue
                fields = deep_merge(raw[base_name], fields)
            elif name in raw:
                fields = deep_merge(raw[name], fields)  # same name: override fields in place
            fields.pop("name", None)
            try:
                specs[name] = self.spec_type.model_validate(
                    {**fields, "name": name}, context={STRICT_UNITS: True}
                )
            except ValidationError as exc:
                problems.extend(errors_from_validation(exc, located, path))
                continue
            raw[name] = fields
        if problems:
            raise SpecError(problems)
        return Catalog(self.family, self.spec_type, raw, specs)


def load_packaged(package: str, filename: str, family: str, spec_type: type[SpecT]) -> Catalog[SpecT]:
    """Load a catalog YAML shipped inside ``package`` (e.g. ``kvsim.hardware.data``)."""
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    located = load_yaml(text, f"<kvsim>/{package.replace('.', '/')}/{filename}")
    empty: Catalog[SpecT] = Catalog(family, spec_type, {}, {})
    return empty.extended(located.data, located, ())
