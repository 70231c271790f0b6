"""``kvsim validate`` time against the size of a large YAML scenario: it should grow linearly.

Run on demand (not part of the test suite), from the repository root:

    .venv/bin/python benchmarks/bench_yaml_validate.py [--sizes 50000,100000,200000] [--shapes keys,list]

Writes, in a temporary folder, one scenario per shape and size (a small valid scenario plus
N keys or items where the shape puts them), runs ``kvsim validate`` on each in this process
(``kvsim.cli.main``; imports are paid once, before the first) and prints CPU seconds, the exit
status, microseconds per key or item and the ratio to the previous size (about 2 for a doubled
size when validation is linear; about 4 would be quadratic). Shapes:

- ``keys``: N unknown keys at the top level (N problems, the first few worded);
- ``nested_keys``: N keys in one unknown mapping (one problem);
- ``list``: an N-item empirical length list, which the schema accepts;
- ``bad_list``: an N-item list under an unknown key;
- ``catalog``: N model entries in the scenario's catalog, each ``{base: qwen3-8b}`` (accepted);
- ``sweep``: a sweep over N catalog entries' ``base`` (one point setting N fields; accepted);
- ``bad_sweep``: the same sweep naming N unknown models (N problems at its one point);
- ``systems``: N systems of one node each (accepted; ``validate`` prints each one).

A file over the YAML size or value limits (``KVSIM_YAML_MAX_BYTES``, ``KVSIM_YAML_MAX_NODES``;
:mod:`kvsim.yaml_parse`) is refused before it is parsed in full; raise them in the environment
to time larger ones.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
import time
from pathlib import Path

from kvsim.cli import main as kvsim_main

BASE = """\
name: big
duration: 10 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 1/s}
  input_tokens: {kind: fixed, value: 100}
  output_tokens: {kind: fixed, value: 10}
systems:
  s:
    node: h20-8x
    nodes: 1
    instance: {tp: 1}
"""


def scenario(shape: str, n: int) -> str:
    """The text of a scenario of ``shape`` with ``n`` keys or items."""
    if shape == "keys":
        return BASE + "".join(f"key{i}: {i}\n" for i in range(n))
    if shape == "nested_keys":
        return BASE + "extra:\n" + "".join(f"  key{i}: {i}\n" for i in range(n))
    if shape == "list":
        values = "".join(f"      - {100 + i % 1000}\n" for i in range(n))
        return BASE.replace("input_tokens: {kind: fixed, value: 100}",
                            "input_tokens:\n    kind: empirical\n    values:\n" + values)
    if shape == "bad_list":
        return BASE + "extra:\n" + "".join(f"  - {i}\n" for i in range(n))
    if shape == "catalog":
        return BASE + "catalog:\n  models:\n" + "".join(f"    m{i}: {{base: qwen3-8b}}\n" for i in range(n))
    if shape == "sweep":
        entries = "".join(f"    m{i}: {{base: qwen3-8b}}\n" for i in range(n))
        keys = "".join(f"  catalog.models.m{i}.base: [qwen3-8b]\n" for i in range(n))
        return BASE + "catalog:\n  models:\n" + entries + "sweep:\n" + keys
    if shape == "systems":
        systems = "".join(f"  s{i}: {{node: h20-8x, nodes: 1, instance: {{tp: 1}}}}\n" for i in range(n))
        return BASE.split("systems:")[0] + "systems:\n" + systems
    if shape == "bad_sweep":
        entries = "".join(f"    m{i}: {{base: qwen3-8b}}\n" for i in range(n))
        keys = "".join(f"  catalog.models.m{i}.base: [nope-{i}]\n" for i in range(n))
        return BASE + "catalog:\n  models:\n" + entries + "sweep:\n" + keys
    raise ValueError(f"unknown shape {shape!r}")


def validate_s(path: Path) -> tuple[float, int]:
    """CPU seconds of ``kvsim validate PATH`` in this process, and its exit status."""
    start = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        status = kvsim_main(["validate", str(path)])
    return time.process_time() - start, status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50000,100000,200000", help="keys or items, comma-separated")
    parser.add_argument("--shapes", default="keys,nested_keys,list,bad_list,catalog,sweep,bad_sweep,systems")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as folder:
        first = Path(folder) / "warm.yaml"
        first.write_text(BASE)
        validate_s(first)  # imports and catalogs, once
        print(f"{'shape':<12} {'N':>9} {'MB':>6} {'CPU s':>7} {'exit':>4} {'us/item':>8} {'x prev':>6}")
        for shape in args.shapes.split(","):
            previous = None
            for n in sizes:
                path = Path(folder) / f"{shape}_{n}.yaml"
                path.write_text(scenario(shape, n))
                seconds, status = validate_s(path)
                ratio = f"{seconds / previous:6.2f}" if previous else "      "
                print(f"{shape:<12} {n:>9,} {path.stat().st_size / 1e6:>6.2f} {seconds:>7.2f} {status:>4} "
                      f"{seconds / n * 1e6:>8.2f} {ratio}", flush=True)
                previous = seconds
                path.unlink()


if __name__ == "__main__":
    main()
