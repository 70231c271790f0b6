"""``kvsim plan --model ... --target ... --candidates ...``: a planning question asked on the command
line, written out as the scenario file it stands for, so the user can keep it, edit it and run it
again with ``kvsim plan FILE`` to the same answer.

A candidate is a node of the catalog with options, ``NODE[+OPTION=VALUE]...``:

``+dram=SIZE``
    a host-DRAM KV tier of ``SIZE`` per node (``512GiB``), started warm when the prompts share
    documents (as every lower tier and pool);
``+nvme=SIZE``
    a local NVMe KV tier of ``SIZE`` per node;
``+pool=POOL_NODE`` or ``+pool=POOL_NODE:N``
    a remote KV pool of ``N`` (default 1) pool nodes per unit, reached over GPU-Direct RDMA, warm;
``+tp=N``
    tensor parallelism of each instance (default: the smallest that fits, as a scenario without it).

Every candidate keeps a prefix cache in HBM. The workload is an open loop of Poisson arrivals:
``--prompt-tokens`` per request (mean), of which ``--shared-prefix-tokens`` are one of
``--documents`` shared documents (Zipf 0.8 popularity when there are several), and
``--output-tokens`` per answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvsim.units import UnitError, format_quantity, parse_quantity

__all__ = ["QuickError", "Candidate", "parse_candidates", "parse_slo", "parse_targets", "positive_quantity",
           "quick_scenario_text"]

OPTIONS = ("dram", "nvme", "pool", "tp")


class QuickError(ValueError):
    """A quick-mode argument that cannot be used; the message names the argument and says why."""


@dataclass(frozen=True)
class Candidate:
    """One ``--candidates`` entry: a node and its KV options."""

    text: str
    node: str
    dram_bytes: float | None = None
    nvme_bytes: float | None = None
    pool_node: str | None = None
    pool_nodes: int = 1
    tp: int | None = None

    @property
    def name(self) -> str:
        """The system's name in the written scenario (letters, digits, '-', '_', '.')."""
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", self.text.replace("+", "_").replace("=", "-")).strip("_")


def parse_candidates(text: str, nodes: list[str], pool_nodes: list[str]) -> list[Candidate]:
    """``--candidates`` (comma-separated ``NODE[+OPTION=VALUE]...``) as candidates, each checked
    against the catalog's ``nodes`` and ``pool_nodes``.

    Raises
    ------
    QuickError
        An empty list, an unknown node, option or pool node, a bad size or count, a repeated candidate.
    """
    from kvsim.yaml_io import did_you_mean

    found: list[Candidate] = []
    entries = [entry.strip() for entry in text.split(",")]
    if not any(entries):
        raise QuickError("--candidates: give at least one node, e.g. h20-8x,l20-8x+dram=512GiB")
    for entry in entries:
        if not entry:
            raise QuickError(f"--candidates: an empty entry in {text!r}")
        node, *options = entry.split("+")
        if node not in nodes:
            raise QuickError(f"--candidates: {entry!r}: unknown node {node!r}{did_you_mean(node, nodes)} "
                             f"(kvsim catalog nodes lists them)")
        values: dict[str, object] = {}
        for option in options:
            key, sep, value = option.partition("=")
            if key not in OPTIONS or not sep or not value:
                hint = did_you_mean(key, OPTIONS) if key not in OPTIONS else ""
                raise QuickError(f"--candidates: {entry!r}: {option!r} is not an option{hint}; options: "
                                 f"+dram=SIZE, +nvme=SIZE, +pool=POOL_NODE[:N], +tp=N")
            if key in values:
                raise QuickError(f"--candidates: {entry!r}: {key} given twice")
            values[key] = _option(entry, key, value, pool_nodes)
        pool = values.get("pool")
        candidate = Candidate(entry, node, values.get("dram"), values.get("nvme"),  # type: ignore[arg-type]
                              pool[0] if isinstance(pool, tuple) else None,
                              pool[1] if isinstance(pool, tuple) else 1, values.get("tp"))  # type: ignore[arg-type]
        if any(c.name == candidate.name for c in found):
            raise QuickError(f"--candidates: {entry!r} is given twice")
        found.append(candidate)
    return found


def _option(entry: str, key: str, value: str, pool_nodes: list[str]) -> object:
    from kvsim.yaml_io import did_you_mean

    if key in ("dram", "nvme"):
        return positive_quantity(value, "bytes", f"--candidates: {entry!r}: {key}={value}", "512GiB")
    if key == "tp":
        if not value.isdigit() or int(value) < 1:
            raise QuickError(f"--candidates: {entry!r}: tp={value}: a whole number of cards, at least 1")
        return int(value)
    name, sep, count = value.partition(":")
    if name not in pool_nodes:
        raise QuickError(f"--candidates: {entry!r}: unknown pool node {name!r}{did_you_mean(name, pool_nodes)} "
                         f"(kvsim catalog pool_nodes lists them)")
    if sep and not (count.isdigit() and int(count) >= 1):
        raise QuickError(f"--candidates: {entry!r}: pool={value}: POOL_NODE:N with N a whole number of pool nodes, "
                         f"at least 1")
    return name, int(count) if sep else 1


def positive_quantity(text: str, dimension: str, where: str, example: str) -> float:
    """``text`` as an SI float of ``dimension`` above zero; else a :class:`QuickError` naming ``where``."""
    try:
        value = parse_quantity(text, dimension)
    except UnitError as exc:
        raise QuickError(f"{where}: {exc} (e.g. {example})") from None
    if not value > 0:
        raise QuickError(f"{where}: a {'size' if dimension == 'bytes' else dimension} above zero (e.g. {example})")
    return value


def parse_targets(texts: list[str]) -> list[float]:
    """``--target`` values (``40/s``, repeatable) as rates, requests/s, ascending without repeats."""
    return sorted({positive_quantity(text, "rate", f"--target: {text!r}", "40/s") for text in texts})


def parse_slo(text: str) -> dict[str, float]:
    """``--slo`` (``ttft_p99=2s,tpot_p99=100ms``) as the scenario's ``slo:`` limits, seconds."""
    known = ("ttft_p99", "tpot_p99", "e2e_p99")
    limits: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        key, sep, value = part.partition("=")
        if key not in known or not sep:
            from kvsim.yaml_io import did_you_mean

            raise QuickError(f"--slo: {part!r}: expected NAME=TIME with NAME one of {', '.join(known)}"
                             f"{did_you_mean(key, known)}, e.g. ttft_p99=2s,tpot_p99=100ms")
        limits[key] = positive_quantity(value, "time", f"--slo: {part!r}", "ttft_p99=2s")
    return limits


def quick_scenario_text(*, model: str, targets: list[float], slo: dict[str, float], candidates: list[Candidate],
                        prompt_tokens: int, output_tokens: int, shared_prefix_tokens: int = 0, documents: int = 1,
                        seed: int = 1, max_units: int = 64, rel_tol: float = 0.1, command: str = "") -> str:
    """The scenario file a quick-mode question stands for, as YAML text (module docstring)."""
    if not 0 <= shared_prefix_tokens < prompt_tokens:
        raise QuickError(f"--shared-prefix-tokens: {shared_prefix_tokens} must be below --prompt-tokens "
                         f"({prompt_tokens}): a prompt is its shared prefix plus its own question")
    lines = [f"# written by: {command}" if command else "# written by kvsim plan (quick mode)",
             "name: quick-plan",
             "description: >",
             f"  The cheapest of {', '.join(c.text for c in candidates)} serving {model} at "
             f"{', '.join(f'{t:g}/s' for t in targets)} within "
             + ", ".join(f"{k.replace('_p99', '').upper()} p99 <= {format_quantity(v, 'time')}" for k, v in slo.items())
             + ".",
             f"seed: {seed}",
             "duration: 240 s",
             "warmup: 60 s",
             f"model: {model}",
             "workload:",
             "  arrival: {kind: poisson, rate: 1/s}"]
    if shared_prefix_tokens:
        lines += ["  prefix:",
                  "    kind: shared_documents",
                  f"    documents: {documents}",
                  "    zipf_s: 0.8",  # (required by the schema; moot for one document)
                  f"    document_tokens: {{kind: fixed, value: {shared_prefix_tokens}}}",
                  f"    suffix_tokens: {{kind: fixed, value: {prompt_tokens - shared_prefix_tokens}}}"]
    else:
        lines.append(f"  input_tokens: {{kind: fixed, value: {prompt_tokens}}}")
    lines.append(f"  output_tokens: {{kind: fixed, value: {output_tokens}}}")
    lines.append("slo: {" + ", ".join(f"{k}: {_seconds(v)}" for k, v in slo.items()) + "}")
    lines.append("systems:")
    for c in candidates:
        instance = f"instance: {{tp: {c.tp}}}, " if c.tp else ""
        cache = []
        if c.dram_bytes:
            cache.append(f"dram: {{capacity: {_bytes(c.dram_bytes)}}}")
        if c.nvme_bytes:
            cache.append(f"nvme: {{capacity: {_bytes(c.nvme_bytes)}}}")
        if c.pool_node:
            cache.append(f"remote: {{pool_node: {c.pool_node}, nodes: {c.pool_nodes}}}, gpu_direct: true")
        if cache and shared_prefix_tokens:  # lower tiers start warm with the shared documents
            cache.append("prewarm: true")
        lines.append(f"  {c.name}: {{node: {c.node}, {instance}kv_cache: {{{', '.join(cache)}}}}}")
    lines.append(f"plan: {{targets: [{', '.join(f'{t:g}/s' for t in targets)}], baseline: {candidates[0].name}, "
                 f"units: {{max: {max_units}}}, rel_tol: {rel_tol:g}}}")
    return "\n".join(lines) + "\n"


def _seconds(value: float) -> str:
    return f"{value * 1e3:g} ms" if value < 1 else f"{value:g} s"


def _bytes(value: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if value >= size and float(value / size).is_integer():
            return f"{value / size:g} {unit}"
    return f"{value:.0f} B"
