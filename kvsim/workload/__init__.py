"""Workloads: what requests arrive, when, how long their prompts and outputs are, and which prompt
blocks they share (prefix structure, trace replay)."""

from kvsim.workload.arrivals import ArrivalSpec, ClosedLoop, GammaArrivals, PoissonArrivals
from kvsim.workload.generate import ClientRequest, ClientStream, RequestArrays, WorkloadSpec, open_loop_requests
from kvsim.workload.lengths import EmpiricalLength, FixedLength, LengthSpec, LognormalLength, UniformLength
from kvsim.workload.prefix import BlockChain, Segment, block_count, chain_hashes, prompt_hashes, source_id
from kvsim.workload.reuse import FixedHit, MultiTurn, PrefixSpec, SharedDocuments
from kvsim.workload.session import Session, Turn, sessions
from kvsim.workload.traces import (
    CsvColumnsSpec,
    TraceSpec,
    load_azure_2023,
    load_bailian,
    load_burstgpt,
    load_csv,
    load_mooncake,
    load_trace,
)

__all__ = [
    "WorkloadSpec", "ArrivalSpec", "PoissonArrivals", "GammaArrivals", "ClosedLoop", "TraceSpec",
    "LengthSpec", "FixedLength", "UniformLength", "LognormalLength", "EmpiricalLength",
    "PrefixSpec", "SharedDocuments", "MultiTurn", "FixedHit",
    "RequestArrays", "open_loop_requests", "ClientStream", "ClientRequest", "Session", "Turn", "sessions",
    "chain_hashes", "source_id", "block_count", "Segment", "prompt_hashes", "BlockChain",
    "load_mooncake", "load_azure_2023", "load_bailian", "load_burstgpt", "load_csv", "load_trace", "CsvColumnsSpec",
]
