"""Collective times from measured latency and bandwidth curves (``engine.collectives: measured``).

The alpha-beta model (:mod:`kvsim.models.collectives`) charges a fixed per-hop latency; a real
all-reduce is one of several algorithms the library picks by message size (one-shot / two-shot
over NVLink, NVLS, ring, tree), and its time is what nccl-tests and the engines' own benchmarks
measure. This module reads those measurements, per interconnect, from
``kvsim/models/data/collectives.yaml`` (each curve with its source, the sizes it covers and a
confidence) and answers the time of one collective of ``nbytes`` over ``ranks`` cards:

- between two measured sizes, log-log interpolation: ``t = t_i (S / s_i) ** (log(t_j / t_i) / log(s_j / s_i))``;
- below the smallest measured size, that size's time (latency-bound: decode-sized messages);
- above the largest, ``t_k + (S - s_k) * f(n) / busbw`` (bandwidth-bound: prefill-sized
  messages), with ``f`` the collective's bus factor (nccl-tests: all-reduce ``2 (n-1) / n``;
  all-gather, reduce-scatter, all-to-all ``(n-1) / n``);
- a rank count between two measured ones: ``t_a ** (1 - w) * t_b ** w``, ``w`` the position of
  ``log n`` between ``log a`` and ``log b``; outside them, the nearest measured curve times
  ``f(n) / f(nearest)``;
- a collective the file does not measure for an interconnect is derived from its all-reduce by
  equal bus bytes: ``t_x(S) = t_allreduce(S / 2)``.

Every piece is non-decreasing in ``S`` (the file's points must be), so the interpolated curve is
too. Times are seconds, sizes bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from kvsim.yaml_io import load_yaml

__all__ = ["COLLECTIVES", "Curve", "Interconnect", "CollectiveCurves", "bus_factor", "load_curves",
           "collective_curves", "interconnect_for", "collective_s", "measured_allreduce_s", "DATA_FILE"]

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
DATA_FILE = "kvsim/models/data/collectives.yaml"
CONFIDENCE = ("H", "M", "L", "ASSUMPTION")


def bus_factor(collective: str, ranks: int) -> float:
    """nccl-tests' bus-bandwidth factor: bytes each card moves per byte of the message."""
    if collective == "all_reduce":
        return 2.0 * (ranks - 1) / ranks
    return (ranks - 1) / ranks


@dataclass(frozen=True)
class Curve:
    """One measured curve: a collective over ``ranks`` cards at message sizes ``sizes`` (bytes,
    increasing) taking ``times_s`` (seconds, non-decreasing), and beyond the last size the bus
    bandwidth ``busbw_Bps`` (bytes/s)."""

    collective: str
    ranks: int
    sizes: tuple[float, ...]
    times_s: tuple[float, ...]
    busbw_Bps: float

    def time_s(self, nbytes: float) -> float:
        """Time of one collective of ``nbytes`` over this curve's ``ranks`` cards, seconds."""
        sizes, times = self.sizes, self.times_s
        if nbytes <= sizes[0]:
            return times[0]
        last = len(sizes) - 1
        if nbytes >= sizes[last]:
            return times[last] + (nbytes - sizes[last]) * bus_factor(self.collective, self.ranks) / self.busbw_Bps
        k = 0
        while sizes[k + 1] < nbytes:
            k += 1
        s0, s1, t0, t1 = sizes[k], sizes[k + 1], times[k], times[k + 1]
        slope = math.log(t1 / t0) / math.log(s1 / s0)
        return t0 * math.pow(nbytes / s0, slope)


@dataclass(frozen=True)
class Interconnect:
    """The measured curves of one interconnect: per collective, per rank count."""

    name: str
    description: str
    curves: dict[str, dict[int, Curve]]
    sources: dict[str, str]
    confidence: dict[str, str]

    def time_s(self, collective: str, nbytes: float, ranks: int) -> float:
        """Time of one ``collective`` of ``nbytes`` (each card's buffer) over ``ranks`` cards, seconds."""
        if collective not in COLLECTIVES:
            raise ValueError(f"unknown collective {collective!r}; known: {', '.join(COLLECTIVES)}")
        if ranks <= 1 or nbytes <= 0:
            return 0.0
        by_ranks = self.curves.get(collective)
        if by_ranks is None:  # derived from the all-reduce by equal bus bytes
            return self.time_s("all_reduce", nbytes / 2.0, ranks)
        if ranks in by_ranks:
            return by_ranks[ranks].time_s(nbytes)
        measured = sorted(by_ranks)
        below = [r for r in measured if r < ranks]
        above = [r for r in measured if r > ranks]
        if below and above:
            a, b = below[-1], above[0]
            w = math.log(ranks / a) / math.log(b / a)
            return math.pow(by_ranks[a].time_s(nbytes), 1.0 - w) * math.pow(by_ranks[b].time_s(nbytes), w)
        nearest = below[-1] if below else above[0]
        return by_ranks[nearest].time_s(nbytes) * bus_factor(collective, ranks) / bus_factor(collective, nearest)


@dataclass(frozen=True)
class CollectiveCurves:
    """Every interconnect of the data file, which one each catalog card uses inside its fast
    domain, and the one between domains."""

    interconnects: dict[str, Interconnect]
    cards: dict[str, str]
    between_domains: str

    def get(self, name: str) -> Interconnect:
        """The interconnect ``name``; an unknown name raises naming the known ones."""
        try:
            return self.interconnects[name]
        except KeyError:
            raise ValueError(f"no measured collective curves for interconnect {name!r} in {DATA_FILE}; "
                             f"known: {', '.join(sorted(self.interconnects))}") from None


def _problem(where: str, message: str) -> ValueError:
    return ValueError(f"{DATA_FILE}: {where}: {message}")


def _curve(where: str, collective: str, ranks: Any, entry: Any, default_busbw: Any) -> Curve:
    if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 2:
        raise _problem(where, f"rank count {ranks!r} must be an integer >= 2")
    if not isinstance(entry, dict) or "points" not in entry:
        raise _problem(where, "needs points: [[bytes, us], ...]")
    points = entry["points"]
    if (not isinstance(points, list) or not points
            or not all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, (int, float)) and x > 0 for x in p)
                       for p in points)):
        raise _problem(where, "points must be a non-empty list of [bytes, us] pairs of positive numbers")
    sizes = tuple(float(p[0]) for p in points)
    times = tuple(float(p[1]) * 1e-6 for p in points)
    if any(b <= a for a, b in zip(sizes, sizes[1:])):
        raise _problem(where, "message sizes must increase")
    if any(b < a for a, b in zip(times, times[1:])):
        raise _problem(where, "times must not decrease with the message size (leave out noisy readings)")
    busbw = entry.get("busbw_GBps", default_busbw)
    if not isinstance(busbw, (int, float)) or isinstance(busbw, bool) or busbw <= 0:
        raise _problem(where, f"busbw_GBps must be a positive number, got {busbw!r}")
    return Curve(collective, ranks, sizes, times, float(busbw) * 1e9)


def load_curves(data: dict[str, Any]) -> CollectiveCurves:
    """Check and read the data file's content (a parsed YAML mapping); a problem raises one
    :class:`ValueError` naming the file and the entry."""
    if not isinstance(data, dict) or not isinstance(data.get("interconnects"), dict):
        raise _problem("top level", "needs an interconnects: mapping")
    interconnects: dict[str, Interconnect] = {}
    for name, spec in data["interconnects"].items():
        if not isinstance(spec, dict):
            raise _problem(f"interconnects.{name}", "must be a mapping")
        unknown = sorted(set(spec) - {"description", *COLLECTIVES})
        if unknown:
            raise _problem(f"interconnects.{name}", f"unknown field(s) {unknown}; known: description, "
                                                    f"{', '.join(COLLECTIVES)}")
        if "all_reduce" not in spec:
            raise _problem(f"interconnects.{name}", "needs an all_reduce curve (the others derive from it)")
        curves: dict[str, dict[int, Curve]] = {}
        sources, confidence = {}, {}
        for collective in COLLECTIVES:
            entry = spec.get(collective)
            if entry is None:
                continue
            where = f"interconnects.{name}.{collective}"
            if not isinstance(entry, dict) or not isinstance(entry.get("ranks"), dict) or not entry["ranks"]:
                raise _problem(where, "needs ranks: {<cards>: {points: ...}}")
            if not entry.get("source"):
                raise _problem(where, "needs a source: where the figures come from and the sizes they cover")
            if entry.get("confidence") not in CONFIDENCE:
                raise _problem(where, f"confidence must be one of {', '.join(CONFIDENCE)}")
            curves[collective] = {r: _curve(f"{where}.ranks.{r}", collective, r, e, entry.get("busbw_GBps"))
                                  for r, e in entry["ranks"].items()}
            sources[collective] = " ".join(str(entry["source"]).split())
            confidence[collective] = entry["confidence"]
        interconnects[name] = Interconnect(name, str(spec.get("description", "")), curves, sources, confidence)
    cards = data.get("cards") or {}
    for card, name in cards.items():
        if name not in interconnects:
            raise _problem(f"cards.{card}", f"names interconnect {name!r}, which the file does not define")
    between = data.get("between_domains")
    if between not in interconnects:
        raise _problem("between_domains", f"must name a defined interconnect, got {between!r}")
    return CollectiveCurves(interconnects, dict(cards), between)


@lru_cache(maxsize=1)
def collective_curves() -> CollectiveCurves:
    """The packaged curves (read once)."""
    text = resources.files("kvsim.models.data").joinpath("collectives.yaml").read_text(encoding="utf-8")
    return load_curves(load_yaml(text, "<kvsim>/" + DATA_FILE).data)  # kvsim's one YAML reader


def interconnect_for(accelerator: Any, collectives: str = "measured",
                     curves: CollectiveCurves | None = None) -> Interconnect:
    """The interconnect ``accelerator``'s collectives run over inside its fast domain: the data
    file's ``cards`` entry for its name, else, for a card without a scale-up link, PCIe of its host
    link's generation. With ``collectives`` ``measured_nccl``, that interconnect's ``-nccl``
    variant (NCCL alone) where the file has one. A scale-up card the file does not list raises,
    naming the card."""
    curves = curves if curves is not None else collective_curves()
    base = _interconnect_name(accelerator, curves)
    if collectives == "measured_nccl" and f"{base}-nccl" in curves.interconnects:
        return curves.get(f"{base}-nccl")
    return curves.get(base)


def _interconnect_name(accelerator: Any, curves: CollectiveCurves) -> str:
    name = curves.cards.get(accelerator.name)
    if name is None and accelerator.scale_up_bandwidth is None:
        link = str(accelerator.host_link).lower()
        name = "pcie-gen5" if "gen5" in link or "gen6" in link else "pcie-gen4"
    if name is None:
        raise ValueError(f"no measured collective curve for card {accelerator.name!r} (a scale-up link kvsim "
                         f"has no measurement for): add it under cards: in {DATA_FILE}, or use "
                         "engine.collectives: alpha_beta")
    return name


def collective_s(collective: str, nbytes: float, ranks: int, interconnect: str) -> float:
    """Time of one ``collective`` of ``nbytes`` per card over ``ranks`` cards of ``interconnect``
    (a name of the data file), seconds."""
    return collective_curves().get(interconnect).time_s(collective, nbytes, ranks)


def measured_allreduce_s(nbytes: float, ranks: int, accelerator: Any, collectives: str = "measured") -> float:
    """All-reduce of ``nbytes`` per card over ``ranks`` cards of ``accelerator`` inside one fast
    domain, from its interconnect's measured curve, seconds (what
    :class:`~kvsim.models.step_time.RooflineStepTime` charges with ``engine.collectives``
    ``measured`` or ``measured_nccl``)."""
    return interconnect_for(accelerator, collectives).time_s("all_reduce", nbytes, ranks)
