"""Hardware descriptions: accelerators and server nodes, with a catalog shipped as data."""

from functools import cache

from kvsim.catalog import Catalog, load_packaged
from kvsim.hardware.specs import (
    DTYPE_BYTES,
    AcceleratorSpec,
    EfficiencySpec,
    HostStagingSpec,
    NicSpec,
    NodeSpec,
    NvmeSpec,
    PoolNodeSpec,
)

__all__ = [
    "AcceleratorSpec", "NodeSpec", "NvmeSpec", "NicSpec", "EfficiencySpec", "DTYPE_BYTES",
    "accelerator_catalog", "node_catalog", "pool_node_catalog", "PoolNodeSpec", "HostStagingSpec",
]


@cache
def accelerator_catalog() -> Catalog[AcceleratorSpec]:
    """The shipped accelerator catalog (read once; specs are immutable)."""
    return load_packaged("kvsim.hardware.data", "accelerators.yaml", "accelerator", AcceleratorSpec)


@cache
def node_catalog() -> Catalog[NodeSpec]:
    """The shipped node catalog."""
    return load_packaged("kvsim.hardware.data", "nodes.yaml", "node", NodeSpec)


@cache
def pool_node_catalog() -> Catalog[PoolNodeSpec]:
    """The shipped catalog of remote KV pool nodes."""
    return load_packaged("kvsim.hardware.data", "pool_nodes.yaml", "pool node", PoolNodeSpec)
