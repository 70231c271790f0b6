"""Settings that would change nothing where they are given: refused, or warned about, before the run.

A field the models never read where it is written misleads: the run looks as if it applied it.
These fields are read only in some configurations:

* ``instance.expert_skew``: only for a mixture-of-experts model with expert parallelism
  (``ep > 1``), where it sets the busiest expert rank's load
  (:func:`kvsim.models.parallel.expert_imbalance`), or with ``weight_offload`` (or
  ``weight_offload_search``), where it picks the cold experts and how many an iteration streams
  (:mod:`kvsim.models.weight_offload`).
* ``instance.micro_batches``: only by the layout step model (pipeline stages, expert or
  attention data parallelism, or tensor parallelism across nodes); plain tensor parallelism
  inside one node is costed by the roofline model, which has no micro-batches
  (:meth:`kvsim.models.parallel.Layout.needs_layout_model`).
* ``instance.pp_schedule``: only with pipeline stages (``pp > 1``) under the layout model.
* ``weight_dtypes.GROUP``: only when the model has weights in that group
  (:meth:`kvsim.models.llm.ModelSpec.group_params`): a model whose output projection is tied to
  its input embedding has no ``lm_head``, a dense model no ``experts``.

An instance field set to its default is never reported (it asks for nothing; a resolved scenario
writes every field). A setting is judged over every sweep point and every system it applies to. If it does nothing at
all of them it is an *error* (it can never matter). If it matters at some and not at others (a
sweep over ``ep`` or over the model, a scenario-wide ``weight_dtypes`` shared by systems of
different models), it is a *warning* naming where it does nothing. With ``layout: best`` a
setting matters if any layout the search may try reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvsim.models.parallel import Layout, candidate_layouts
from kvsim.scenario.sweep import zipped_paths
from kvsim.yaml_io import Located, Path, dotted_path

if TYPE_CHECKING:
    from kvsim.models import ModelSpec
    from kvsim.scenario.load import Catalogs, ScenarioPoint
    from kvsim.serving.specs import PoolSpec

__all__ = ["inert_settings"]


@dataclass(frozen=True)
class _Use:
    """One place a setting applies: the system (named only for a scenario-wide setting), the
    sweep point (``""`` without a sweep), and why it does nothing there (None: it matters)."""

    system: str | None
    point: str
    reason: str | None


def inert_settings(points: list[ScenarioPoint], catalogs: Catalogs,
                   located: Located) -> tuple[list[str], list[str]]:
    """``(errors, warnings)`` about settings that do nothing, as ``file:line: field: message``.

    Call it after the catalog references are checked (every model and node named exists).
    """
    uses: dict[Path, list[_Use]] = {}  # setting's field path -> every place it applies, in order
    for point in points:
        spec = point.spec
        at = ", ".join(f"{k}={v}" for k, v in point.params.items())
        for name, system in spec.systems.items():
            model = catalogs.models[spec.system_model(name)]
            groups = model.group_params()
            own = system.weight_dtypes or {}
            for group in spec.weight_dtypes:
                if group not in own:  # a system's own entry overrides the scenario's
                    uses.setdefault(("weight_dtypes", group), []).append(
                        _Use(name, at, _weight_reason(model, group, groups)))
            for group in own:
                uses.setdefault(("systems", name, "weight_dtypes", group), []).append(
                    _Use(None, at, _weight_reason(model, group, groups)))
            for pool_name, pool in system.pool_specs().items():
                per_node = catalogs.nodes[pool.node].accelerators_per_node
                path = ("systems", name) + system.pool_path(pool_name) + ("instance",)
                for knob in ("expert_skew", "micro_batches", "pp_schedule"):
                    # a default changes nothing wherever it is written (resolved scenarios write
                    # every field); only a value that asks for something can go unread
                    if getattr(pool.instance, knob) != type(pool.instance).model_fields[knob].default:
                        uses.setdefault(path + (knob,), []).append(
                            _Use(None, at, _instance_reason(knob, pool, model, per_node)))
    errors: list[str] = []
    warnings: list[str] = []
    sweep = located.data.get("sweep") if isinstance(located.data, dict) else None
    for path, applied in uses.items():
        idle = [use for use in applied if use.reason is not None]
        if not idle:
            continue
        blame = _source(path, sweep if isinstance(sweep, dict) else {})
        if len(idle) == len(applied):
            everywhere = " (at every sweep point)" if len(points) > 1 else ""
            errors.append(located.problem(blame, f"does nothing{everywhere}: {idle[0].reason}; remove it"))
        else:
            warnings.append(located.problem(blame, (
                f"does nothing {_where(idle, applied)}: {idle[0].reason} (it applies elsewhere, so it is kept)")))
    return errors, warnings


def _where(idle: list[_Use], applied: list[_Use]) -> str:
    """``for system d``, ``at sweep point [ep=1]``, ...: where a setting that matters elsewhere
    does nothing (a system it does nothing for at every point is named once)."""
    parts = []
    for system in dict.fromkeys(use.system for use in idle):
        points = [use.point for use in idle if use.system == system]
        named = f"for system {system}" if system is not None else ""
        if len(points) == sum(use.system == system for use in applied):
            parts.append(named)
            continue
        shown = ", ".join(f"[{p}]" for p in points[:3]) + (" ..." if len(points) > 3 else "")
        parts.append(f"{named} at sweep point{'s' if len(points) > 1 else ''} {shown}".strip())
    return "; ".join(parts)


def _weight_reason(model: ModelSpec, group: str, groups: dict[str, float]) -> str | None:
    if groups[group] > 0:
        return None
    if group == "lm_head":
        return (f"{model.name} ties its output projection to the input embedding (tie_word_embeddings), so "
                "it has no lm_head weights; weight_dtypes.embedding sets the format of both")
    if group == "experts":
        return f"{model.name} is a dense model: it has no routed experts"
    return f"{model.name} has no {group} weights"


def _instance_reason(knob: str, pool: PoolSpec, model: ModelSpec, per_node: int) -> str | None:
    """Why ``knob`` of ``pool``'s instance does nothing (None: it matters)."""
    inst = pool.instance
    if knob == "expert_skew" and model.moe is not None and (inst.weight_offload or inst.weight_offload_search):
        return None  # the offloaded experts are the coldest (kvsim.models.weight_offload)
    if inst.layout == "best":
        tried = [lay for lay in candidate_layouts(model, pool.nodes * per_node)
                 if not (per_node % lay.cards and lay.cards % per_node)]
        if any(_reads(knob, lay, model, per_node) for lay in tried):
            return None
        return f"none of the layouts layout: best tries ({', '.join(lay.label() for lay in tried)}) reads it: " \
            + _why_not(knob, model)
    layout = Layout(tp=inst.tp, pp=inst.pp, ep=inst.ep, dp_attention=inst.dp_attention)
    if _reads(knob, layout, model, per_node):
        return None
    if not layout.needs_layout_model(per_node):
        return f"{layout.label()} inside one {pool.node} node is plain tensor parallelism; " + _why_not(knob, model)
    return f"at {layout.label()}, " + _why_not(knob, model)


def _reads(knob: str, layout: Layout, model: ModelSpec, per_node: int) -> bool:
    """Whether the step model of ``layout`` reads ``knob`` (see the module docstring)."""
    if knob == "expert_skew":
        return model.moe is not None and layout.ep > 1
    if knob == "micro_batches":
        return layout.needs_layout_model(per_node)
    return layout.needs_layout_model(per_node) and layout.pp > 1  # pp_schedule


def _why_not(knob: str, model: ModelSpec) -> str:
    if knob == "expert_skew":
        if model.moe is None:
            return f"{model.name} is a dense model (no experts)"
        return ("expert popularity matters only when whole experts are spread over the cards (ep = tp) or "
                "experts are offloaded (weight_offload)")
    if knob == "micro_batches":
        return ("each iteration runs as one batch; micro-batches exist only with pp > 1, ep, dp_attention "
                "or tp across nodes")
    return "a pipeline schedule needs pipeline stages (pp > 1)"


def _source(path: Path, sweep: dict[str, Any]) -> Path:
    """Field to blame: the sweep key that sets ``path`` at every point, else the field itself."""
    dotted = dotted_path(path)
    for key in sweep:
        if dotted in zipped_paths(key):
            return ("sweep", key)
    return path
