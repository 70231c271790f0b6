"""Where a card's efficiency figures come from, and the rule that carries a figure between cards.

Each accelerator in the catalog says, for the figures that set a step's time (``compute``,
``memory``, ``kv_memory``), which of three kinds of evidence it rests on
(``efficiency_basis`` in ``kvsim/hardware/data/accelerators.yaml``):

- ``measured``: a public measurement on this card family (kernel tables, an engine's benchmark
  page, a serving run), cited in the entry's ``sources``;
- ``sibling``: no measurement of this card exists, so the figure is carried over from a card that
  has one, by a rule that relates the two physically;
- ``assumption``: neither; a knob for calibration, not a fact.

The rules. A bandwidth fraction is set by the memory system -- the DRAM technology, its controllers
and the architecture's load path -- not by the peak it is a fraction of, so:

``same_memory_system``
    Same architecture and same memory technology (``architecture`` and ``memory_kind`` equal): the
    fraction carries over unchanged (the L20 from the L40S: one AD102 die, the same GDDR6 bus).
``scaled``
    Same architecture and memory technology but a measured ratio between the two cards on the
    same kernel (``scale``, cited in ``sources``): the sibling's fraction times that ratio (the
    H20's paged-KV reads from the H100's, by the H20/H800 ratio of one benchmark run on both).

``gemm_scaled`` (``compute`` only)
    A prefill iteration's MFU is mostly GEMM time, so between two full-rate parts (neither a
    cut-down die) it carries as the sibling's measured MFU times the measured ratio of the two
    cards' GEMM efficiencies at the shapes of the sibling's measurement, in the same engines'
    kernel tables (``scale``, cited in ``sources``). The ratio carries the architectures'
    difference, so the cards need not share one: the H100's BF16 figure from the A100's.

``compute`` has no other sibling rule, and none for a cut-down card: its MFU is not set by the
architecture alone but by how much of the iteration is GEMM time at the card's peak, and a card
whose peak is cut (the H20's 148 TFLOPS on the H100's die, the L20's 119.5 on the L40S's) spends
a larger share of it in GEMMs -- InferSim takes 0.6 for the H20 against 0.35 for the H800 -- so a
carried MFU would be wrong in a known direction. Such a card's ``compute`` stays an assumption
until measured. The per-format figures (``compute_formats``) are never carried.

A sibling's figure must itself be measured: a chain of carried figures would hide how far the
evidence is. :func:`basis_problems` checks every carried figure of a catalog against its rule,
so a sibling re-measured without its dependants is caught (``tests/test_efficiency_basis.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from kvsim.spec_types import FrozenSpec

if TYPE_CHECKING:  # a type only: specs imports this module
    from kvsim.hardware.specs import AcceleratorSpec

__all__ = ["EfficiencyBasis", "BASIS_FIGURES", "carried_figure", "basis_problems", "TYPED_DIGITS"]

BASIS_FIGURES = ("compute", "memory", "kv_memory")
"""The efficiency figures every shipped card states the basis of."""

TYPED_DIGITS = 2
"""The catalog types fractions to two decimals: a carried figure matches its rule to that rounding."""


class EfficiencyBasis(FrozenSpec):
    """The evidence behind one efficiency figure of a card.

    Attributes
    ----------
    kind : str
        ``measured``, ``sibling`` or ``assumption`` (see the module docstring).
    card : str or None
        The sibling the figure is carried from (``sibling`` only).
    rule : str or None
        ``same_memory_system``, ``scaled`` or ``gemm_scaled`` (``sibling`` only).
    scale : float or None
        The measured ratio this card / the sibling (``scaled`` and ``gemm_scaled``), dimensionless.
    """

    kind: Literal["measured", "sibling", "assumption"]
    card: str | None = None
    rule: Literal["same_memory_system", "scaled", "gemm_scaled"] | None = None
    scale: float | None = Field(default=None, gt=0.0)

    @model_validator(mode="after")
    def _sibling_fields(self) -> EfficiencyBasis:
        if self.kind == "sibling":
            if self.card is None or self.rule is None:
                raise ValueError("a sibling basis names the card it is carried from (card:) and the rule (rule: "
                                 "same_memory_system, scaled or gemm_scaled)")
            if (self.rule in ("scaled", "gemm_scaled")) != (self.scale is not None):
                raise ValueError("scale: is the measured ratio the `scaled` and `gemm_scaled` rules need, and only "
                                 "they")
        elif self.card is not None or self.rule is not None or self.scale is not None:
            raise ValueError(f"card, rule and scale belong to a sibling basis, not to kind {self.kind!r}")
        return self


def _figure(card: AcceleratorSpec, figure: str) -> float:
    value = getattr(card.efficiency, figure)
    if isinstance(value, dict):
        raise ValueError(f"efficiency.{figure} is a figure per number format, measured per card: it is never carried")
    if value is None and figure == "kv_memory":  # an unstated paged-KV figure reads at the weights'
        value = card.efficiency.memory
    return float(value)


def carried_figure(card: AcceleratorSpec, sibling: AcceleratorSpec, figure: str, basis: EfficiencyBasis) -> float:
    """What the rule of ``basis`` gives ``card`` for ``figure`` from ``sibling``'s figure.

    Raises ValueError when the two cards are not related as the rule requires."""
    if basis.rule == "gemm_scaled":
        if figure != "compute":
            raise ValueError(f"the gemm_scaled rule carries compute (a prefill iteration's MFU), not {figure}")
        return _figure(sibling, figure) * (basis.scale or 1.0)
    for attribute in ("architecture", "memory_kind"):
        mine, theirs = getattr(card, attribute), getattr(sibling, attribute)
        if mine is None or mine != theirs:
            raise ValueError(f"{card.name} and {sibling.name} differ in {attribute} ({mine} vs {theirs}): the "
                             f"{basis.rule} rule relates cards of one architecture and memory technology")
    value = _figure(sibling, figure)
    return value * basis.scale if basis.rule == "scaled" and basis.scale is not None else value


def basis_problems(cards: Mapping[str, AcceleratorSpec], required: bool = False) -> list[str]:
    """Every carried figure of ``cards`` that its rule does not give, one sentence each.

    Parameters
    ----------
    cards : mapping of name to AcceleratorSpec
        A catalog's accelerators.
    required : bool
        Also report a card that does not state the basis of each of :data:`BASIS_FIGURES` (the
        shipped catalog states them all; a scenario's own card need not).
    """
    problems = []
    for name, card in cards.items():
        if required:
            missing = [figure for figure in BASIS_FIGURES if figure not in card.efficiency_basis]
            if missing:
                problems.append(f"{name}: efficiency_basis does not state the basis of {', '.join(missing)}")
        for figure, basis in card.efficiency_basis.items():
            if basis.kind != "sibling" or basis.card is None:
                continue
            sibling = cards.get(basis.card)
            if sibling is None:
                problems.append(f"{name}: efficiency.{figure} is carried from {basis.card!r}, which is not in the "
                                f"catalog")
                continue
            their_basis = sibling.efficiency_basis.get(figure)
            if their_basis is None or their_basis.kind != "measured":
                problems.append(f"{name}: efficiency.{figure} is carried from {basis.card}, whose own figure is not "
                                f"measured (no chains of carried figures)")
                continue
            try:
                expected = carried_figure(card, sibling, figure, basis)
            except ValueError as exc:
                problems.append(f"{name}: efficiency.{figure}: {exc}")
                continue
            if round(expected, TYPED_DIGITS) != round(_figure(card, figure), TYPED_DIGITS):
                problems.append(f"{name}: efficiency.{figure} is {_figure(card, figure)}, but the {basis.rule} rule "
                                f"from {basis.card} ({_figure(sibling, figure)}) gives {expected:.3f}")
    return problems
