"""Trace loading speed: a multi-million-row CSV trace, generated in a temporary folder, loaded
by the vectorised readers (``kvsim.workload.trace_csv``).

Run on demand (not part of the test suite), from the repository root:

    .venv/bin/python benchmarks/bench_trace_load.py [--rows 2000000]

Writes four files of ``--rows`` rows each (BurstGPT's columns; a generic CSV with a prefix-hash
column of 16-token blocks; Azure 2023 wall-clock stamps; Mooncake JSONL with 512-token hash_ids),
then prints the seconds each loader takes and its rows per second. The files are random but
seeded, so runs are comparable.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from kvsim.workload import CsvColumnsSpec, load_azure_2023, load_burstgpt, load_csv, load_mooncake


def _write(folder: Path, rows: int) -> dict[str, Path]:
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.exponential(0.01, rows))  # ~100 req/s
    prompt = rng.integers(1, 8192, rows)
    output = rng.integers(1, 1024, rows)
    files = {"burstgpt": folder / "burstgpt.csv", "csv": folder / "generic.csv", "azure_2023": folder / "azure.csv",
             "mooncake": folder / "mooncake.jsonl"}
    pd.DataFrame({"Timestamp": np.round(t, 3), "Model": "ChatGPT", "Request tokens": prompt,
                  "Response tokens": output, "Total tokens": prompt + output, "Log Type": "Conversation log"},
                 ).to_csv(files["burstgpt"], index=False)
    # short prompts for the hash file keep it a realistic size: 1..4 blocks of shared-prefix ids
    hash_prompt = np.minimum(prompt, 64)
    hash_blocks = -(-hash_prompt // 16)
    ids = [" ".join(map(str, range(k))) for k in hash_blocks.tolist()]
    pd.DataFrame({"t_ms": np.round(t * 1e3, 3), "prompt": hash_prompt, "gen": output, "blocks": ids},
                 ).to_csv(files["csv"], index=False)
    stamps = pd.Timestamp("2023-11-16 18:00:00") + pd.to_timedelta(t, unit="s")
    pd.DataFrame({"TIMESTAMP": stamps.strftime("%Y-%m-%d %H:%M:%S.%f"), "ContextTokens": prompt,
                  "GeneratedTokens": output}).to_csv(files["azure_2023"], index=False)
    moon_prompt = np.minimum(prompt, 2048)  # up to 4 blocks of 512 tokens
    with open(files["mooncake"], "w") as handle:
        for ms, n_in, n_out in zip(np.round(t * 1e3).astype(int).tolist(), moon_prompt.tolist(), output.tolist()):
            handle.write(f'{{"timestamp": {ms}, "input_length": {n_in}, "output_length": {n_out}, '
                         f'"hash_ids": {list(range(-(-n_in // 512)))}}}\n')
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    args = parser.parse_args()
    columns = CsvColumnsSpec(arrival="t_ms", arrival_unit="ms", input_tokens="prompt", output_tokens="gen",
                             prefix_hashes="blocks", hash_block_tokens=16)
    loaders = {"burstgpt": load_burstgpt, "csv": lambda p: load_csv(p, columns), "azure_2023": load_azure_2023,
               "mooncake": load_mooncake}
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        files = _write(Path(tmp), args.rows)
        print(f"wrote {len(files)} files of {args.rows:,} rows in {time.perf_counter() - started:.1f} s")
        for name, path in files.items():
            started = time.perf_counter()
            trace = loaders[name](path)
            seconds = time.perf_counter() - started
            print(f"{name:11s} {path.stat().st_size / 2**20:7.1f} MiB  {len(trace):,} requests in {seconds:6.2f} s "
                  f"({len(trace) / seconds:,.0f} rows/s)")


if __name__ == "__main__":
    main()
