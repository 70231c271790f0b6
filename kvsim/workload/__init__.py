"""Workloads: what requests arrive, when, and how long their prompts and outputs are."""

from kvsim.workload.arrivals import ArrivalSpec, ClosedLoop, GammaArrivals, PoissonArrivals
from kvsim.workload.generate import ClientStream, RequestArrays, WorkloadSpec, open_loop_requests
from kvsim.workload.lengths import EmpiricalLength, FixedLength, LengthSpec, LognormalLength, UniformLength

__all__ = [
    "WorkloadSpec", "ArrivalSpec", "PoissonArrivals", "GammaArrivals", "ClosedLoop",
    "LengthSpec", "FixedLength", "UniformLength", "LognormalLength", "EmpiricalLength",
    "RequestArrays", "open_loop_requests", "ClientStream",
]
