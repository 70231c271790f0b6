"""The kernel modules of the per-event path that ``setup.py`` compiles (see :mod:`kvsim.backend`).

A plain tuple of module names, read by ``setup.py`` as a literal (the build does not import
kvsim). A kernel may import another kernel; its compiled copy then imports the other's compiled
copy. Order: a kernel after the kernels it imports.
"""

KERNELS = (
    "kvsim.metrics.levels",
    "kvsim.models.step_time",
    "kvsim.metrics.engine_time",
    "kvsim.serving.sequence",
    "kvsim.kv.block_pool",
    "kvsim.kv.runs",
    "kvsim.kv.store",
    "kvsim.kv.index",
    "kvsim.serving.decode_run",
    "kvsim.serving.scheduler",
    "kvsim.serving.instance",
    "kvsim.serving.load_board",
    "kvsim.serving.engine_loop",
    "kvsim.sim.frontend",
    "kvsim.network.filling",
    "kvsim.network.flows",
    "kvsim.workload.block_hash",
)
