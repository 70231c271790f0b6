# The compiled types the engine loop reads in C (Cython reads this beside engine_loop.py; the
# pure-Python reference ignores it).

from kvsim.kv.block_pool cimport BlockPool
from kvsim.metrics.engine_time cimport EngineTime
from kvsim.metrics.levels cimport TimeWeightedLevel
from kvsim.serving.scheduler cimport Batch, BatchScheduler
from kvsim.serving.instance cimport Instance
