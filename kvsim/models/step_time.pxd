# Field types of RooflineStepTime and the C function that fills a decode run's step times into C
# arrays, in the compiled backend (Cython reads this beside step_time.py; the pure-Python
# reference ignores it, keeps __slots__, and fills lists with the same function).

from libc.stdlib cimport free
from kvsim.metrics.levels cimport _doubles

cdef class RooflineStepTime:
    cdef public object model, accelerator, dtype, kv_dtype, engine, _rates, _remote_Bps
    cdef public long tp, _allreduces
    cdef public bint _dense_weights
    cdef public dict weight_dtypes, _decode_cache, _comm_cache, _tokens_cache
    # every one a float in the reference (checked by tests/test_backends.py)
    cdef public double _kv_bytes_per_token_card, _body_flops, _lm_head_flops, _attn_prefill, _attn_decode
    cdef public double _dense_bytes_read, _activation_bytes_per_token, _hop_latency_s, _peer_Bps, _kernels_s
    cdef public double _kv_Bps, _step_fixed_s, _step_per_seq_s, _step_per_token_s, _issue_s
    cdef public long _graph_max
    cdef public double _stream_layers, _stream_k, _stream_tau
    cdef public bint _host_overlap
    cdef public object _stream
    cdef tuple _token_terms(self, tokens)

cpdef double streamed_memory_s(double compute_s, double memory_s, double layers, double offloaded,
                              double layer_s) except? -1

cpdef double exposed_host_s(double host_s, double compute_s, double memory_s, double comm_s,
                            double kernels_s) except? -1

cdef void fill_decode_steps(tuple terms, double context_tokens, double seqs, Py_ssize_t steps,
                            double* total_s, double* compute_s, double* memory_s) except *
