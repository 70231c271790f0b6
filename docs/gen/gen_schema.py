"""The docs page of scenario fields (``docs/reference/scenario-fields.md``), generated from the JSON
Schema ``docs/scenario.schema.json`` and the pydantic models it is made from (their attribute
docstrings)."""

from __future__ import annotations

import json
import re
from typing import Any

from gen_text import BANNER, DOCS, escape_html, numpydoc_parts, one_line, rst_to_md


def _anchor(name: str) -> str:
    return name.lower()


def _type(node: dict[str, Any]) -> str:
    """A schema node as a short type: `ref` links, quantities by their kind, enums by their values."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(name)})"
    for key in ("anyOf", "oneOf"):
        if key in node:
            kinds = [_type(sub) for sub in node[key] if sub.get("type") != "null"]
            nullable = any(sub.get("type") == "null" for sub in node[key])
            out = " or ".join(dict.fromkeys(kinds))
            return out + (" or null" if nullable else "")
    if "enum" in node:
        return " \\| ".join(f"`{value}`" for value in node["enum"])
    kind = node.get("type")
    description = node.get("description", "")
    match = re.match(r"an? (.+?) quantity with its unit", description)
    if kind == "string" and match:
        examples = ", ".join(f"`{e}`" for e in node.get("examples", [])[:2])
        return f"{match.group(1)} ({examples})" if examples else match.group(1)
    if kind == "array":
        items = node.get("items", {})
        return f"list of {_type(items)}" if items else "list"
    if kind == "object":
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            return f"map of name → {_type(extra) if extra else 'any'}"
        return "mapping"
    if isinstance(kind, list):
        return " or ".join(kind)
    return kind or "any"


def _range(node: dict[str, Any]) -> str:
    nodes = [node] + [sub for key in ("anyOf", "oneOf") for sub in node.get(key, [])]
    parts = []
    for sub in nodes:
        for key, sign in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<"),
                          ("minLength", "length ≥"), ("minItems", "items ≥"), ("minProperties", "entries ≥")):
            if key in sub:
                parts.append(f"{sign} {sub[key]}")
    return ", ".join(dict.fromkeys(parts))


def _default(node: dict[str, Any]) -> str:
    if "default" not in node:
        return ""
    value = node["default"]
    return "`" + json.dumps(value, ensure_ascii=False).replace("|", "\\|") + "`"


_ARRIVALS = ("ClosedLoop", "DiurnalArrivals", "GammaArrivals", "PoissonArrivals", "PhasedArrivals", "PhaseSpec",
             "StagedArrivals", "RateStage")
PROSE: dict[str, tuple[str, str]] = {
    **{name: ("Arrivals", "scenario-files.md#arrivals") for name in _ARRIVALS},
    **{name: ("Lengths", "scenario-files.md#lengths")
       for name in ("EmpiricalLength", "FixedLength", "LognormalLength", "UniformLength")},
    **{name: ("KV cache", "scenario-files.md#kv-cache")
       for name in ("KVCacheSpec", "TierSpec", "RemotePoolSpec", "ConnectorSpec")},
    **{name: ("Prefill/decode disaggregation", "scenario-files.md#prefilldecode-disaggregation")
       for name in ("PoolSpec", "HandoffSpec", "StaticController", "ThresholdController", "ProportionalController")},
    **{name: ("Prefix structure", "scenario-files.md#prefix-structure")
       for name in ("MultiTurn", "SharedDocuments", "FixedHit")},
    **{name: ("Studies", "scenario-files.md#studies")
       for name in ("GapStudySpec", "OptionsStudySpec", "PDStudySpec", "FigureRange")},
    **{name: ("How to plan capacity", "../planning.md#writing-the-scenario")
       for name in ("PlanSpec", "SensitivitySpec", "SharedPoolSpec", "UnitRange")},
    **{name: ("Your own hardware", "scenario-files.md#your-own-hardware")
       for name in ("CatalogEntries", "CatalogAcceleratorSpec", "CatalogEfficiencySpec", "CatalogHostStagingSpec",
                    "CatalogMlaSpec", "CatalogModelSpec", "CatalogMoeSpec", "CatalogNicSpec", "CatalogNodeSpec",
                    "CatalogNvmeSpec", "CatalogPoolNodeSpec", "CatalogVisionTowerSpec")},
    **{name: ("An example", "scenario-files.md#an-example")
       for name in ("ScenarioSpec", "WorkloadSpec", "SloSpec", "CompareSpec")},
    "CatalogEfficiencyBasis": ("Add a card", "../how-to/add-a-card.md#for-everyone-the-shipped-catalog"),
    "AdapterSpec": ("LoRA adapters", "scenario-files.md#lora-adapters"),
    "LoraSpec": ("LoRA adapters", "scenario-files.md#lora-adapters"),
    "CacheAwareSpec": ("Cache-aware routing", "scenario-files.md#cache-aware-routing"),
    "CostSpec": ("Cost", "scenario-files.md#cost"),
    "CsvColumnsSpec": ("Trace replay", "scenario-files.md#trace-replay"),
    "TraceSpec": ("Trace replay", "scenario-files.md#trace-replay"),
    "EngineSpec": ("Engine costs", "scenario-files.md#engine-costs"),
    "InstanceSpec": ("Parallel layouts", "scenario-files.md#parallel-layouts"),
    "WeightOffloadSpec": ("Weight offload", "scenario-files.md#parallel-layouts"),
    "EarlyExitSpec": ("Early exit", "scenario-files.md#engine-costs"),
    "StepVarianceSpec": ("Step-time variance", "scenario-files.md#engine-costs"),
    "FailureSpec": ("Spares for failures", "../planning.md#spares-for-failures-planfailures"),
    "RunFailureSpec": ("Node failures", "scenario-files.md#node-failures"),
    "SystemSpec": ("Systems", "scenario-files.md#systems"),
    "ScaleUpSpec": ("Supernode tiers", "scenario-files.md#supernode-tiers"),
    "ScaleUpTierSpec": ("Supernode tiers", "scenario-files.md#supernode-tiers"),
}
"""Where the prose of Scenario files (or the planning page) explains each object: a map of
sections, not of facts; ``mkdocs build --strict`` checks every anchor."""


def _model_classes() -> dict[str, type]:
    """Every pydantic model class kvsim defines, by name (the schema's titles are class names; the
    ``Catalog*`` copies of the catalog specs are found under their own names without the prefix)."""
    import pydantic

    import kvsim.scenario.json_schema  # noqa: F401  (imports every spec the schema is made from)

    found: dict[str, type] = {}
    todo = list(pydantic.BaseModel.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("kvsim."):
            found.setdefault(cls.__name__, cls)
    return found


def attribute_docs(cls: type) -> dict[str, str]:
    """A model's per-field text from its source: the docstring under a field, or else the comment
    on its line (base classes first, so a subclass's own text wins)."""
    import ast
    import inspect
    import textwrap

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not klass.__module__.startswith("kvsim."):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        lines = source.split("\n")
        body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
        for i, stmt in enumerate(body):
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            following = body[i + 1] if i + 1 < len(body) else None
            if (isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                    and isinstance(following.value.value, str)):
                docs[stmt.target.id] = inspect.cleandoc(following.value.value)
                continue
            last = lines[(stmt.end_lineno or stmt.lineno) - 1]
            if "#" in last and "noqa" not in last.split("#", 1)[1]:
                docs[stmt.target.id] = last.split("#", 1)[1].strip()
    return docs


def _object_section(name: str, node: dict[str, Any], defs: dict[str, Any], title: str | None = None) -> list[str]:
    summary, documented = numpydoc_parts(node.get("description", ""))
    classes = _model_classes()
    cls = classes.get(name) or classes.get(name.removeprefix("Catalog"))
    if cls is not None:
        documented = {**attribute_docs(cls), **documented}
    out = [f"## {title or name} {{#{_anchor(name)}}}", ""]
    if summary:
        out += [escape_html(rst_to_md(summary)), ""]
    if name in PROSE:
        section, link = PROSE[name]
        where = "How to plan capacity" if link.startswith("../") else "Scenario files"
        out += [f"Explained in [{where} › {section}]({link}).", ""]
    properties = node.get("properties", {})
    if not properties:
        out += [f"Type: {_type({k: v for k, v in node.items() if k != 'description'})}", ""]
        return out
    required = set(node.get("required", []))
    out += ["| field | type | default | range | what it is |", "|---|---|---|---|---|"]
    for field, sub in properties.items():
        text = documented.get(field) or (sub.get("description", "") if "pattern" not in sub else "")
        if not text:  # a field documented under a parent schema's description, or an option's own
            text = next((s.get("description", "") for s in sub.get("anyOf", []) if "pattern" not in s), "")
        flag = " (required)" if field in required else ""
        cells = [f"`{field}`{flag}", _type(sub), _default(sub), _range(sub), one_line(rst_to_md(text))]
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    return out


def scenario_fields_page() -> str:
    schema = json.loads((DOCS / "scenario.schema.json").read_text(encoding="utf-8"))
    defs = schema.get("$defs", {})
    out = [BANNER.format(source="docs/scenario.schema.json (kvsim schema)"), "",
           "# Scenario fields", "",
           "Every field a scenario file may hold, generated from the JSON Schema that `kvsim schema` writes "
           "from the scenario's pydantic models (`kvsim/scenario/schema.py` and the specs it uses), so it is the "
           "set `kvsim validate` accepts. *type* links to the section of a nested object; a quantity is a "
           "string with its unit (`300 s`, `96 GiB`, `400 Gbit/s`, `20/s`). *range* is the value's physical "
           "range as the type checks it. How the fields fit together, with examples: "
           "[Scenario files](scenario-files.md).", "",
           f"The file as a whole is a [ScenarioSpec](#{_anchor('ScenarioSpec')}); the other "
           f"{len(defs)} sections are its nested objects, in alphabetical order.", ""]
    out += _object_section("ScenarioSpec", schema, defs, title="ScenarioSpec (the file)")
    for name in sorted(defs):
        out += _object_section(name, defs[name], defs)
    return "\n".join(out).rstrip() + "\n"
