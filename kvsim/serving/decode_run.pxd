# The compiled Sequence, for the typed locals of DecodeRun.plan and DecodeRun.settle (Cython reads
# this beside decode_run.py; the pure-Python reference ignores it).

from kvsim.serving.sequence cimport Sequence
