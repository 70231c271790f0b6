"""Generate splitwise-sim's ``rr_conv_<rate>`` request traces as Azure-2023 CSV files kvsim replays.

Run on demand, from the repository root:

    .venv/bin/python benchmarks/rr_conv_trace.py [--rate 80] [--end-time 600] [--seed 0] [--out PATH]

The recipe is splitwise-sim's ``generate_trace.py`` (Mutinifni/splitwise-sim, commit
``84356b4fc96e4258f03f719ccf2629f7b1725fec``, functions ``generate_conv_traces`` ->
``generate_trace_from_prompt_token_size_distributions``), re-implemented here (not copied):

- ``max_requests = 1,000,000`` exponential inter-arrival gaps of mean ``1 / rate`` (scipy
  ``expon(scale=1/rate).rvs``, which draws ``standard_exponential`` from numpy's global
  ``RandomState``), summed into arrival times;
- then 1,000,000 prompt lengths and, separately, 1,000,000 output lengths resampled with
  replacement from the ``ContextTokens`` and ``GeneratedTokens`` columns of the Azure LLM
  inference 2023 conversation trace (pandas ``Series.sample(n, replace=True)``, which draws
  ``randint(0, rows, n)`` from the same global state), so a request's prompt and output lengths
  are independent draws;
- rows with arrival ``< end_time`` are kept.

splitwise-sim does not seed its generator. Seeding numpy's legacy ``RandomState`` with 0 before
the rate-80 trace reproduces the request count the issue quotes for ``rr_conv_80`` (48,263 in
600 s), so this generator uses ``RandomState(seed)`` -- numpy's frozen legacy stream (NEP 19), not
kvsim's named streams -- and draws in splitwise's order, giving the same arrivals and lengths as
splitwise's script would under ``np.random.seed(seed)`` (checked bit for bit against scipy 1.x
and pandas 3.1 while writing this).

Output: the Azure 2023 CSV format (``TIMESTAMP,ContextTokens,GeneratedTokens``), read by kvsim's
``azure_2023`` trace loader. ``TIMESTAMP`` is ``origin`` plus the arrival time, to the
nanosecond. The loader counts time from the earliest row, so a replay starts at the first
arrival: every arrival is shifted earlier by the first gap (about 10 ms for ``rr_conv_80``).
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path
from typing import NamedTuple

import numpy as np

HERE = Path(__file__).resolve().parent
AZURE_CONV = HERE.parents[1] / "shared" / "traces" / "AzureLLMInferenceTrace_conv_2023.csv"
"""The Azure LLM inference 2023 conversation trace (Azure/AzurePublicDataset, CC-BY-4.0), kept beside
the repository in ``shared/traces`` (see its README)."""

SPLITWISE_MAX_REQUESTS = 1_000_000
"""Draws per column in splitwise-sim's ``generate_trace.py`` (its ``max_requests``)."""

ORIGIN = "2023-11-16T00:00:00"
"""Wall-clock time of arrival 0 in the written CSV (the day of the Azure trace; any day would do)."""


class Trace(NamedTuple):
    """Requests of a generated trace: arrival times (s) and prompt / output lengths (tokens)."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray


def read_lengths(path: str | Path = AZURE_CONV) -> tuple[np.ndarray, np.ndarray]:
    """``ContextTokens`` and ``GeneratedTokens`` of an Azure 2023 CSV, in file order (the order
    splitwise-sim samples row positions from)."""
    import pandas as pd  # here, not at import: a benchmark replaying the written trace needs no pandas

    frame = pd.read_csv(path, usecols=["ContextTokens", "GeneratedTokens"])
    return frame["ContextTokens"].to_numpy(np.int64), frame["GeneratedTokens"].to_numpy(np.int64)


def generate(rate_per_s: float, end_time_s: float, seed: int = 0, lengths: str | Path = AZURE_CONV,
             max_requests: int = SPLITWISE_MAX_REQUESTS) -> Trace:
    """Poisson arrivals at ``rate_per_s`` with Azure-conversation lengths, splitwise-sim's recipe.

    Parameters
    ----------
    rate_per_s : float
        Mean arrival rate, requests/s.
    end_time_s : float
        Requests arriving at or after this time (s) are dropped.
    seed : int
        Seed of numpy's legacy ``RandomState`` (splitwise-sim's global-state draws).
    lengths : str or Path
        Azure 2023 CSV whose columns the lengths are resampled from.
    max_requests : int
        Draws per column before the ``end_time_s`` cut (splitwise-sim: 1,000,000); changing it
        changes which length draws land on which request.
    """
    context, generated = read_lengths(lengths)
    state = np.random.RandomState(seed)
    # scipy's expon(scale=s).rvs(n) is standard_exponential(n) * s; keep the product, not a division
    arrival = np.cumsum(state.standard_exponential(max_requests) * (1.0 / rate_per_s))
    prompt = context[state.randint(0, len(context), size=max_requests)]
    output = generated[state.randint(0, len(generated), size=max_requests)]
    keep = arrival < end_time_s
    if keep.all():
        raise ValueError(f"{max_requests} draws at {rate_per_s:g}/s end before {end_time_s:g} s: raise max_requests")
    return Trace(arrival[keep], prompt[keep], output[keep])


def azure_csv_text(trace: Trace, origin: str = ORIGIN) -> str:
    """The trace as Azure 2023 CSV text (timestamps to the nanosecond after ``origin``)."""
    stamps = np.datetime64(origin, "ns") + np.rint(trace.arrival_s * 1e9).astype("timedelta64[ns]")
    text = np.char.replace(np.datetime_as_string(stamps, unit="ns"), "T", " ")
    lines = [f"{t},{p},{o}" for t, p, o in zip(text.tolist(), trace.input_tokens.tolist(),
                                               trace.output_tokens.tolist())]
    return "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(lines) + "\n"


def write(path: str | Path, rate_per_s: float = 80.0, end_time_s: float = 600.0, seed: int = 0,
          lengths: str | Path = AZURE_CONV) -> str:
    """Generate the trace and write it to ``path`` (folders created); returns its sha256."""
    text = azure_csv_text(generate(rate_per_s, end_time_s, seed, lengths))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def ensure(path: str | Path, rate_per_s: float = 80.0, end_time_s: float = 600.0, seed: int = 0) -> Path:
    """``path``, generated first if it does not exist yet (the benchmarks' on-demand cache)."""
    path = Path(path)
    if not path.exists():
        write(path, rate_per_s, end_time_s, seed)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=80.0, help="requests/s (splitwise: 30 to 250 in steps of 10)")
    parser.add_argument("--end-time", type=float, default=600.0, help="seconds of arrivals")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lengths", type=Path, default=AZURE_CONV)
    parser.add_argument("--out", type=Path, default=None, help="default: benchmarks/traces/rr_conv_<rate>.csv")
    args = parser.parse_args()
    out = args.out or HERE / "traces" / f"rr_conv_{args.rate:g}.csv"
    trace = generate(args.rate, args.end_time, args.seed, args.lengths)
    digest = write(out, args.rate, args.end_time, args.seed, args.lengths)
    print(f"{out}: {len(trace.arrival_s)} requests in [0, {args.end_time:g}) s; mean prompt "
          f"{trace.input_tokens.mean():.1f}, mean output {trace.output_tokens.mean():.1f} tokens; sha256 {digest}")


if __name__ == "__main__":
    main()
