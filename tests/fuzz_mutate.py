"""Hypothesis strategies that mutate a scenario (tests/fuzz_bases.py) into a fuzz case.

Three levels, as the hand-made corpus of issue 11 had them: the YAML tree (drop, add or rename
keys, swap types, change units, extreme numbers, booleans and ``off``/``yes`` for numbers,
lists for scalars, sweeps of random fields including ``catalog.*``, ``study:`` blocks), the bytes
of the file (truncate, insert, flip, re-encode, BOM, NUL) and the side files it names (missing,
a folder, garbage, truncated, header only, NaN/negative/fractional tokens, rows of the wrong
shape). A case may also carry ``--set`` overrides instead of an edit. Every draw goes through
hypothesis, so a seed gives the same cases.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from hypothesis import strategies as st

from fuzz_bases import Base

DIRECTORY = b"\0<directory>"
"""Side-file content meaning "make a folder of that name"."""


@dataclass
class Case:
    base: str
    text: bytes
    files: dict[str, bytes | None] = field(default_factory=dict)  # None: the file is missing
    sets: list[str] = field(default_factory=list)
    api: bool = False  # through the Python API instead of the command line
    api_change: tuple[str, Any] | None = None
    ops: list[str] = field(default_factory=list)
    runnable: bool = True

    def describe(self) -> str:
        return f"{self.base}: {'; '.join(self.ops) or 'unchanged'}" + (f" --set {self.sets}" if self.sets else "")


NASTY: list[Any] = [
    None, True, False, 0, 1, 2, -1, -7, 0.5, -0.5, 1e-300, 1e308, 10**30, -(10**30), 2**63, float("inf"),
    float("-inf"), float("nan"), "", " ", "off", "yes", "no", "on", "null", "abc", "1e999", "nan", "-inf s",
    "10 s", "10 ms", "-5 s", "0 s", "1e12 s", "5 GiB", "0 GiB", "-1 GiB", "1e30 TiB", "20/s", "0/s", "-3/s",
    "1e12/s", "10 apples", "1.5", "1_000", "0x10", "١٠", "∞", "auto", "true", "x" * 3000, [], {}, [1, 2],
    [None], {"a": 1}, {"kind": "fixed"}, {"kind": "bogus"}, [[[]]], "h20-8x", "qwen3-8b", "bf16", "fp8",
    "/dev/zero", "/dev/null", ".", "missing.jsonl",
]
UNITS = ["", "s", "ms", "us", "ns", "min", "h", "d", "/s", "/min", "/h", "B", "KiB", "GiB", "GB", "TiB", "TB",
         "Gbit/s", "GB/s", "GiB/s", "tokens", "%", "parsecs", "S", "Sec", "gib"]
NUMBERS = ["0", "-1", "1e308", "1e-308", "0.0001", "3.5", "1e9", "nan", "inf", "-0", "00", "1e400", "12345678901234567890"]
SNIPPETS = [b"\x00", b"\xff\xfe", b"\xc3\x28", b"\t", b": ", b":", b"{", b"}", b"[", b"]", b"&a ", b"*a", b"*zz",
            b"!!python/object:os.system ", b"!!binary ", b"!!float ", b"\n- ", b"'", b'"', b"#", b"%YAML 1.1\n",
            b"---\n", b"...\n", b"\xe2\x80\xa8", b"\r", b"\x1b[31m", b"? ", b"|\n", b">-\n", b"<<: *a\n", b"\n  ",
            b"\xef\xbb\xbf", b"\\", b"%", b"@", b"`"]
FILE_VALUES = ["/dev/zero", "/dev/null", "/", ".", "", "missing.jsonl", "s.yaml", "/etc/hostname", "../",
               "trace.jsonl", "azure.csv", "prompts.csv", "outputs.txt", "/proc/self/status", "nul\x00l"]
TREE_OPS = ["delete", "rename", "add_key", "nasty", "copy_other", "unit", "number", "wrap_list", "unwrap",
            "empty_container", "sweep", "study", "file_value", "bool_for_number"]


def _nasty(draw) -> Any:
    """A value of NASTY, copied: an edit that later adds to a list or mapping drawn from it must not
    change NASTY itself (the next draws would differ, which hypothesis reports as a flaky strategy)."""
    return copy.deepcopy(draw(st.sampled_from(NASTY)))


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = []
    if isinstance(node, dict):
        for key, value in node.items():
            out.append(prefix + (key,))
            out += _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node[:8]):
            out.append(prefix + (i,))
            out += _paths(value, prefix + (i,))
    return out


def _get(tree: Any, path: tuple) -> Any:
    for part in path:
        tree = tree[part]
    return tree


def _parent(tree: Any, path: tuple) -> tuple[Any, Any]:
    return _get(tree, path[:-1]), path[-1]


def _dotted(path: tuple) -> str:
    return ".".join(map(str, path))


def tree_edit(draw, tree: dict) -> str:
    """Change ``tree`` in place by one edit (``draw``: the case's hypothesis draw); returns what it
    did. A plain function, not a strategy: hypothesis caches strategies by their arguments, and a
    tree edited in place would make a cached one draw differently."""
    op = draw(st.sampled_from(TREE_OPS))
    paths = _paths(tree)
    if op == "sweep":
        return _add_sweep(draw, tree, paths)
    if op == "study":
        return _add_study(draw, tree)
    if not paths:
        tree[draw(st.sampled_from(["name", "x", "systems"]))] = _nasty(draw)
        return "filled an empty tree"
    if op == "file_value":
        found = [p for p in paths if p[-1] in ("file", "calibration")]
        if found:
            path = draw(st.sampled_from(found))
            parent, key = _parent(tree, path)
            parent[key] = draw(st.sampled_from(FILE_VALUES))
            return f"{_dotted(path)} = {parent[key]!r}"
        op = "nasty"
    path = draw(st.sampled_from(paths))
    parent, key = _parent(tree, path)
    value = parent[key]
    where = _dotted(path)
    if op == "delete":
        del parent[key]
        return f"deleted {where}"
    if op == "rename" and isinstance(parent, dict):
        new = draw(st.sampled_from([str(key) + "s", str(key).upper(), str(key)[:-1] or "_", str(key) + "_x",
                                    str(key).replace("_", "-"), " " + str(key), "", "a.b", 7, True]))
        if new not in parent:
            parent[new] = parent.pop(key)
            return f"renamed {where} to {new!r}"
    if op == "add_key" and isinstance(value, dict):
        new = draw(st.sampled_from(["unknown", "kind", "name", "duration", "max", "file", "nodes", "0"]))
        value[new] = _nasty(draw)
        return f"added {where}.{new}"
    if op == "copy_other":
        other = draw(st.sampled_from(paths))
        parent[key] = copy.deepcopy(_get(tree, other)) if other[:len(path)] != path else None
        return f"{where} = value of {_dotted(other)}"
    if op == "unit" and isinstance(value, str):
        match = re.match(r"^\s*(-?[0-9.eE+_]+)\s*(.*)$", value)
        if match:
            number, unit = match.groups()
            if draw(st.booleans()):
                parent[key] = f"{number} {draw(st.sampled_from(UNITS))}".strip()
            else:
                parent[key] = f"{draw(st.sampled_from(NUMBERS))} {unit}".strip()
            return f"{where}: {value!r} -> {parent[key]!r}"
    if op in ("number", "unit") and isinstance(value, (int, float)) and not isinstance(value, bool):
        factor = draw(st.sampled_from([0, -1, 1e9, 1e-9, 0.5, 1.5, 10**12, 2**64]))
        parent[key] = value * factor if draw(st.booleans()) else draw(st.integers(-10, 10**6))
        return f"{where}: {value!r} -> {parent[key]!r}"
    if op == "bool_for_number":
        parent[key] = draw(st.sampled_from([True, False, "off", "yes", "no", "on"]))
        return f"{where} = {parent[key]!r}"
    if op == "wrap_list":
        parent[key] = [value] if draw(st.booleans()) else [value, value]
        return f"{where} wrapped in a list"
    if op == "unwrap" and isinstance(value, (list, dict)) and value:
        parent[key] = value[0] if isinstance(value, list) else next(iter(value.values()))
        return f"{where} unwrapped"
    if op == "empty_container":
        parent[key] = draw(st.sampled_from([[], {}, None]))
        return f"{where} emptied"
    parent[key] = _nasty(draw)
    return f"{where} = {_short(parent[key])}"


def _mild_edit(draw, tree: dict) -> str:
    """Scale a number or a quantity by a small factor, or sweep a field over its own value twice."""
    leaves = [p for p in _paths(tree) if p[0] != "sweep" and isinstance(_get(tree, p), (int, float, str))
              and not isinstance(_get(tree, p), bool)]
    if not leaves:
        return "no leaf to edit"
    path = draw(st.sampled_from(leaves))
    parent, key = _parent(tree, path)
    value = parent[key]
    factor = draw(st.sampled_from([0.5, 2, 3, 0.25]))
    if draw(st.integers(0, 3)) == 0:
        sweep = tree["sweep"] if isinstance(tree.get("sweep"), dict) else {}
        sweep[_dotted(path)] = [value, value]
        tree["sweep"] = sweep
        return f"sweep {_dotted(path)} over [{value!r}] twice"
    if isinstance(value, (int, float)):
        parent[key] = type(value)(max(1, value * factor)) if isinstance(value, int) else value * factor
    else:
        match = re.match(r"^\s*([0-9.]+)\s*(\S.*)$", value)
        if not match:
            return f"{_dotted(path)} left alone"
        parent[key] = f"{float(match.group(1)) * factor:g} {match.group(2)}"
    return f"{_dotted(path)}: {value!r} -> {parent[key]!r}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 40 else text[:37] + "..."


def _add_sweep(draw, tree: dict, paths: list[tuple]) -> str:
    """A sweep over a random field (any, ``catalog.*`` included), of a random size."""
    leaves = [p for p in paths if p and p[0] != "sweep" and not isinstance(_get(tree, p), (dict, list))]
    size = draw(st.sampled_from([0, 1, 2, 2, 3, 5, 50, 401, 10_000]))
    if leaves and draw(st.integers(0, 4)):
        path = draw(st.sampled_from(leaves))
        current = _get(tree, path)
        values = [current] + [_nasty(draw) for _ in range(min(size, 4))]
        values = (values * (size // max(1, len(values)) + 1))[:size]
        key = _dotted(path)
    else:
        key = draw(st.sampled_from(["nonexistent.field", "systems.nosuch.nodes", "catalog.nodes.h20-8x.nics.count",
                                    "duration, warmup", "systems", "workload.arrival", "seed", "", ".", "a..b",
                                    "catalog.models.qwen3-8b.num_layers", "study.kind", "sweep.x"]))
        values = [_nasty(draw) for _ in range(min(size, 6))]
        values = (values * (size // max(1, len(values)) + 1))[:size]
    if draw(st.booleans()) or not isinstance(tree.get("sweep"), dict):
        tree["sweep"] = {}
    tree["sweep"][key] = values if draw(st.integers(0, 6)) else _nasty(draw)
    if size >= 50 and draw(st.booleans()):  # a second axis: a grid of size x size points
        tree["sweep"]["seed"] = list(range(size))
    return f"sweep {key!r} over {size} value(s)"


def _add_study(draw, tree: dict) -> str:
    systems = list(tree.get("systems") or {}) if isinstance(tree.get("systems"), dict) else []
    some = draw(st.sampled_from([systems, systems[:1], ["nosuch"], [], systems * 2]))
    sweep = list(tree.get("sweep") or {}) if isinstance(tree.get("sweep"), dict) else []
    swept = draw(st.sampled_from(sweep + ["workload.arrival.rate", "nosuch", None]))
    kind = draw(st.sampled_from(["pd", "gap", "options", "bogus", None]))
    study: dict[str, Any] = {"kind": kind}
    if kind == "pd":
        study.update(timeline=some, timeline_point=draw(st.sampled_from([0, 1, 5, -1, 10**9])), x=swept)
    elif kind == "gap":
        study.update(configs={"a": some[:2], "b": list(reversed(some[:2]))} if draw(st.booleans()) else {},
                     metric=draw(st.sampled_from(["input_tokens_per_s", "ttft_p99", "nosuch"])), x=swept,
                     panel=swept)
    elif kind == "options":
        study.update(reference=draw(st.sampled_from(some + [None])), x=swept, load=swept)
    tree["study"] = study
    return f"study {kind}"


@st.composite
def byte_edit(draw, data: bytes) -> tuple[bytes, str]:
    op = draw(st.sampled_from(["truncate", "insert", "flip", "delete_line", "duplicate_line", "indent", "encode"]))
    pos = draw(st.integers(0, max(0, len(data))))
    if op == "truncate":
        return data[:pos], f"truncated at byte {pos}"
    if op == "insert":
        snippet = draw(st.sampled_from(SNIPPETS)) if draw(st.integers(0, 3)) else draw(st.binary(min_size=1,
                                                                                                   max_size=6))
        return data[:pos] + snippet + data[pos:], f"inserted {snippet!r} at byte {pos}"
    if op == "flip" and data:
        pos = min(pos, len(data) - 1)
        new = draw(st.integers(0, 255))
        return data[:pos] + bytes([new]) + data[pos + 1:], f"byte {pos} -> {new:#x}"
    lines = data.split(b"\n")
    i = draw(st.integers(0, max(0, len(lines) - 1)))
    if op == "delete_line":
        return b"\n".join(lines[:i] + lines[i + 1:]), f"deleted line {i + 1}"
    if op == "duplicate_line":
        return b"\n".join(lines[:i + 1] + lines[i:]), f"duplicated line {i + 1}"
    if op == "indent":
        lines[i] = draw(st.sampled_from([b" ", b"  ", b"\t", b"- "])) + lines[i]
        return b"\n".join(lines), f"indented line {i + 1}"
    how = draw(st.sampled_from(["utf-16", "bom", "latin-1", "crlf", "cr", "utf-32"]))
    text = data.decode("utf-8", "replace")
    if how == "bom":
        return b"\xef\xbb\xbf" + data, "UTF-8 BOM"
    if how == "crlf":
        return data.replace(b"\n", b"\r\n"), "CRLF line ends"
    if how == "cr":
        return data.replace(b"\n", b"\r"), "CR line ends"
    if how == "latin-1":
        return ("# café\n" + text).encode("latin-1", "replace"), "latin-1 with an accent"
    return text.encode(how), f"encoded {how}"


@st.composite
def side_file_edit(draw, name: str, data: bytes) -> tuple[bytes | None, str]:
    op = draw(st.sampled_from(["missing", "directory", "empty", "garbage", "truncate", "header_only", "bad_number",
                               "wrong_shape", "non_utf8", "bom", "huge_number", "blank_lines", "bytes"]))
    lines = data.split(b"\n")
    if op == "missing":
        return None, f"{name} missing"
    if op == "directory":
        return DIRECTORY, f"{name} is a folder"
    if op == "empty":
        return b"", f"{name} empty"
    if op == "garbage":
        return draw(st.binary(min_size=1, max_size=200)), f"{name} garbage"
    if op == "truncate":
        pos = draw(st.integers(0, len(data)))
        return data[:pos], f"{name} truncated at {pos}"
    if op == "header_only":
        return lines[0] + b"\n", f"{name} header only"
    if op in ("bad_number", "huge_number"):
        numbers = list(re.finditer(rb"\d+(\.\d+)?", data))
        if numbers:
            m = numbers[draw(st.integers(0, len(numbers) - 1))]
            new = draw(st.sampled_from([b"NaN", b"nan", b"-5", b"1.5", b"0", b"abc", b"", b"inf", b"1e999", b"true",
                                        b"null", b'"7"', b"99999999999999999999999", b"1e30", b"2.0"]))
            return data[:m.start()] + new + data[m.end():], f"{name}: {m.group()!r} -> {new!r}"
    if op == "wrong_shape":
        row = draw(st.sampled_from([b"1,2,3,4,5", b"1", b"[1, 2]", b"{}", b'{"timestamp": 1}', b"null", b"a,b",
                                    b'"unterminated', b"{\"input_length\": 5, \"output_length\": 5, \"timestamp\": -1}"]))
        i = draw(st.integers(1, max(1, len(lines) - 1)))
        return b"\n".join(lines[:i] + [row] + lines[i:]), f"{name}: row {row!r} at line {i + 1}"
    if op == "non_utf8":
        pos = draw(st.integers(0, len(data)))
        return data[:pos] + b"\xff\xfe\x80" + data[pos:], f"{name}: non-UTF-8 bytes at {pos}"
    if op == "bom":
        return b"\xef\xbb\xbf" + data, f"{name}: BOM"
    if op == "blank_lines":
        return data.replace(b"\n", b"\n\n"), f"{name}: blank lines"
    return draw(st.binary(max_size=50)) + data, f"{name}: junk prefix"


SET_TEXTS = ["[" * 5000 + "]" * 5000, "{a: " * 3000 + "1" + "}" * 3000, "{tp: 2, tp: 4}", "&a [*a]", "[&a [1], *a, *a]",
             "!!python/object/apply:os.system [echo pwned]", "!!binary aGVsbG8=", "{? [1, 2]: 3}", "[" * 70,
             "x" * 200_000, "0x10", "1e999", "1_000", "{a: &x 1, b: *x, a: 2}", "'unterminated", "\ud800",
             "- a\n- b", "{<<: {tp: 2}, tp: 4}", "[" + ", ".join(["1"] * 20_000) + "]", "!!set {a, b}"]
"""``--set`` values aimed at the YAML reader itself: nesting past its limit, repeated keys and
anchors, tags, complex keys, huge texts and lists, surrogates."""

SET_PATHS = ["duration", "warmup", "seed", "workload.arrival.rate", "systems", "model", "sweep", "study",
             "catalog.nodes.x.base", "workload.input_tokens.value", "replications", "a.b.c", "systems.0",
             "", "=", "workload..rate", "name"]


@st.composite
def cases(draw, bases: list[Base]) -> Case:
    """One fuzz case: a base and one to three mutations of its tree, bytes, side files or ``--set``."""
    base = draw(st.sampled_from(bases))
    case = Case(base.name, base.text.encode(), dict(base.files), runnable=base.runnable)
    tree = yaml.safe_load(base.text)
    n_edits = draw(st.integers(1, 3))
    level = draw(st.sampled_from(["tree"] * 5 + ["mild"] * 3 + ["bytes"] * 2 + ["files"] * (2 if base.files else 0) + ["set"]))
    if level == "tree":
        for _ in range(n_edits):
            case.ops.append(tree_edit(draw, tree))
        case.text = yaml.safe_dump(tree, sort_keys=False, allow_unicode=True, width=100).encode()
        if draw(st.integers(0, 9)) == 0:
            case.text, op = draw(byte_edit(case.text))
            case.ops.append(op)
    elif level == "mild":  # edits that mostly keep the scenario valid, so the run is exercised too
        for _ in range(n_edits):
            case.ops.append(_mild_edit(draw, tree))
        case.text = yaml.safe_dump(tree, sort_keys=False, allow_unicode=True, width=100).encode()
    elif level == "bytes":
        for _ in range(n_edits):
            case.text, op = draw(byte_edit(case.text))
            case.ops.append(op)
    elif level == "files":
        name = draw(st.sampled_from(sorted(base.files)))
        case.files[name], op = draw(side_file_edit(name, base.files[name]))
        case.ops.append(op)
    else:
        for _ in range(n_edits):
            paths = [_dotted(p) for p in _paths(tree)] + SET_PATHS
            value = _nasty(draw)
            if draw(st.integers(0, 2)) == 0:
                text = draw(st.sampled_from(SET_TEXTS))
            else:
                text = value if isinstance(value, str) and draw(st.booleans()) else yaml.safe_dump(
                    value, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()
            case.sets.append(f"{draw(st.sampled_from(paths))}={text}")
    if draw(st.integers(0, 9)) == 0:  # the Python API: load, check, change a field, run
        case.api = True
        paths = [_dotted(p) for p in _paths(tree)] + SET_PATHS
        case.api_change = (draw(st.sampled_from(paths)), _nasty(draw))
    return case
