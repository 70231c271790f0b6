"""The scenario format as a JSON Schema, for editors (``kvsim schema``).

Editors that read JSON Schema (VS Code with the YAML extension, any yaml-language-server client,
JetBrains IDEs) complete field names, show each field's description and flag unknown fields,
wrong types and quantities without a unit while a scenario is written. The schema is derived
from :class:`~kvsim.scenario.schema.ScenarioSpec` (pydantic's ``model_json_schema``), so it
cannot drift from what ``kvsim validate`` accepts; quantities are strings with a unit, checked
by the same regular expressions as :func:`kvsim.units.quantity_pattern`.

It checks the shape of a file, not everything: references (model and node names: the shipped
ones are offered for completion, any other name is left to ``kvsim validate``, since a scenario may
define its own under ``catalog:``), sizing and cross-field rules are ``kvsim validate``'s. Quantities
are never negative. The catalog entries of a scenario (``catalog:``) are
checked field by field, with every field optional (an entry may override a few fields of a
shipped one, ``base: NAME``).

Put this first line in a scenario file (path relative to the file)::

    # yaml-language-server: $schema=../docs/scenario.schema.json
"""

from __future__ import annotations

import json
from typing import Any

from kvsim.scenario.schema import ScenarioSpec

__all__ = ["scenario_json_schema", "scenario_json_schema_text", "SCHEMA_DIALECT"]

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


_FILLED_ON_LOAD = {"EmpiricalLength": ("values", "file")}
"""Required fields the loader fills from another one (``file:`` is read into ``values``)."""


def _catalog_entry_schemas() -> dict[str, tuple[str, dict[str, Any]]]:
    from kvsim.hardware import AcceleratorSpec, NodeSpec, PoolNodeSpec
    from kvsim.models import ModelSpec

    families = {"accelerators": AcceleratorSpec, "nodes": NodeSpec, "pool_nodes": PoolNodeSpec, "models": ModelSpec}
    return {family: (spec.__name__, spec.model_json_schema(mode="validation")) for family, spec in families.items()}


def _optional_everywhere(node: Any, rename: dict[str, str]) -> Any:
    """A copy with no ``required`` lists (an entry overrides only some fields, merged deeply
    over its base) and ``$ref`` targets renamed."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "required":
                continue
            if key == "$ref" and isinstance(value, str) and value.startswith("#/$defs/"):
                value = "#/$defs/" + rename.get(value.removeprefix("#/$defs/"), value.removeprefix("#/$defs/"))
            out[key] = _optional_everywhere(value, rename)
        return out
    if isinstance(node, list):
        return [_optional_everywhere(item, rename) for item in node]
    return node


def _shipped_names() -> dict[str, list[str]]:
    """The names of the shipped catalog entries a scenario field refers to, by field name."""
    from kvsim.hardware import node_catalog, pool_node_catalog
    from kvsim.models import model_catalog

    return {"node": sorted(node_catalog().names()), "pool_node": sorted(pool_node_catalog().names()),
            "model": sorted(model_catalog().names())}


def _name_choices(schema: dict[str, Any], names: dict[str, list[str]]) -> None:
    """Offer the shipped catalog names wherever a field named ``node``, ``pool_node`` or ``model``
    takes a string, so editors complete them; any other string stays valid (a name under the
    scenario's own ``catalog:``), which ``kvsim validate`` checks."""
    def visit(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in (node.get("properties") or {}).items():
                if key in names and isinstance(value, dict):
                    choices = {"enum": names[key], "description": f"a shipped entry (kvsim catalog {_FAMILY[key]})"}
                    free = {"type": "string", "description": f"or an entry of this scenario's catalog.{_FAMILY[key]}"}
                    if value.get("type") == "string":
                        rest = {k: v for k, v in value.items() if k != "type"}
                        node["properties"][key] = {**rest, "anyOf": [choices, free]}
                    elif any(option.get("type") == "string" for option in value.get("anyOf", [])):
                        others = [o for o in value["anyOf"] if o.get("type") != "string"]
                        value["anyOf"] = [choices, free, *others]
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for item in node:
                visit(item)

    visit(schema)


_FAMILY = {"node": "nodes", "pool_node": "pool_nodes", "model": "models"}


def scenario_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a scenario file, as a dict."""
    schema = ScenarioSpec.model_json_schema(mode="validation")
    defs = schema.setdefault("$defs", {})
    for name, (field, alternative) in _FILLED_ON_LOAD.items():
        definition = defs[name]
        definition["required"] = [f for f in definition.get("required", []) if f != field]
        definition["anyOf"] = [{"required": [field]}, {"required": [alternative]}]
    properties = schema["properties"]
    properties.pop("warmup_auto", None)  # written in a file as ``warmup: auto``
    properties["warmup"] = {"anyOf": [properties["warmup"], {"const": "auto", "description": (
        "find the warm-up per run by MSER-5 (two passes; see docs/statistics.md)")}], "default": "0 s"}
    catalog = defs["CatalogEntries"]
    for family, (name, entry) in _catalog_entry_schemas().items():
        own = entry.pop("$defs", {})
        rename = {n: f"Catalog{n}" for n in [*own, name]}
        for def_name, definition in own.items():
            defs[rename[def_name]] = _optional_everywhere(definition, rename)
        entry = _optional_everywhere(entry, rename)
        entry["properties"] = {"base": {"type": "string", "description": (
            f"start from this shipped or scenario entry (kvsim catalog {family}) and override the fields given")},
            **entry["properties"]}
        entry["description"] = (f"A catalog entry (every field optional over its base). "
                                f"{entry.get('description', '')}").strip()
        defs[rename[name]] = entry
        catalog["properties"][family]["additionalProperties"] = {"$ref": f"#/$defs/{rename[name]}"}
    _name_choices(schema, _shipped_names())
    return {
        "$schema": SCHEMA_DIALECT,
        "$comment": "Generated by `kvsim schema` from kvsim.scenario.schema.ScenarioSpec; do not edit by hand.",
        **schema,
    }


def scenario_json_schema_text() -> str:
    """The schema as the text ``kvsim schema`` writes (sorted keys, 2-space indent, final newline)."""
    return json.dumps(scenario_json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
