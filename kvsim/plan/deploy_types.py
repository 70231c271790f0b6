"""The settings kvsim writes into deployment files, each with the scenario fields it came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["EngineCommand", "Gap", "Setting", "show"]


def show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)



@dataclass(frozen=True)
class Setting:
    """One emitted flag (``--x``) or environment variable (``NAME``) and where its value came from.

    ``sources`` are dotted scenario field paths (``systems.S.instance.tp``), catalog fields
    (``catalog:models.M.hf_id``) or ``units`` (the argument); ``rule`` says how the value follows
    from them when it is not a copy.
    """

    name: str
    value: str | None  # None: a flag without a value
    sources: tuple[str, ...]
    source_values: tuple[str, ...]
    rule: str = ""


@dataclass(frozen=True)
class Gap:
    """A scenario field with a value that an engine's command line does not carry, and why."""

    engine: str  # vllm, sglang, k8s or all
    field: str
    value: Any  # as the scenario holds it; shown with show()
    why: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", show(self.value))


@dataclass
class EngineCommand:
    """One engine's launch of one instance of a group: argv (program first) and environment."""

    engine: str
    program: tuple[str, ...]
    flags: list[Setting] = field(default_factory=list)
    env: list[Setting] = field(default_factory=list)

    def argv(self) -> list[str]:
        out = list(self.program)
        for s in self.flags:
            out += [s.name] if s.value is None else [s.name, s.value]
        return out

    def add(self, name: str, value: Any, sources: tuple[str, ...], values: tuple[Any, ...], rule: str = "") -> None:
        self.flags.append(Setting(name, None if value is None else str(value), sources,
                                  tuple(show(v) for v in values), rule))

    def set_env(self, name: str, value: Any, sources: tuple[str, ...], values: tuple[Any, ...], rule: str = "") -> None:
        self.env.append(Setting(name, str(value), sources, tuple(show(v) for v in values), rule))


