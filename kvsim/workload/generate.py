"""Turn a workload spec into concrete requests, drawing from named random streams.

Stream names (stable, so adding a component never shifts these draws):
``workload.arrival``, ``workload.input_tokens``, ``workload.output_tokens`` for open loop;
``workload.client.<i>`` for closed-loop client ``i``. Prefix structure draws only from
``workload.prefix.*`` streams:

- ``shared_documents``: ``workload.prefix.document_tokens`` (each document's length, drawn once),
  ``workload.prefix.document`` and ``workload.prefix.suffix_tokens`` (open loop, one per request),
  ``workload.prefix.client.<i>`` (closed-loop client ``i``: its documents and suffixes);
- ``fixed_hit``: no randomness of its own (prompt lengths are ``input_tokens``);
- ``multi_turn``: see :mod:`kvsim.workload.session`.

So ``fixed_hit`` leaves every request's arrival, prompt and output length exactly as without a
prefix, and ``shared_documents`` leaves arrivals and outputs (open loop) unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator

from kvsim.rng import RandomStreams
from kvsim.spec_types import FrozenSpec, PositiveInt, PositiveSeconds
from kvsim.workload.adapters import AdapterSpec
from kvsim.workload.arrivals import ArrivalSpec, ClosedLoop, PhasedArrivals, open_loop_arrival_times
from kvsim.workload.lengths import LengthSpec
from kvsim.workload.requests import RequestArrays
from kvsim.workload.reuse import DocumentLibrary, FixedHit, MultiTurn, PrefixSpec, SharedDocuments, SharedPrefix
from kvsim.workload.traces import TraceSpec, native_block_tokens

__all__ = ["WorkloadSpec", "RequestArrays", "open_loop_requests", "ClientStream", "ClientRequest"]


class WorkloadSpec(FrozenSpec):
    """Arrival process, prompt and output length distributions (tokens), optional prefix structure.

    Which length fields a workload takes depends on where prompts come from:

    - ``arrival`` poisson / gamma / closed_loop, no ``prefix``: ``input_tokens`` and
      ``output_tokens`` required (as always);
    - ``prefix: shared_documents``: ``input_tokens`` omitted (a prompt is document + suffix),
      ``output_tokens`` required;
    - ``prefix: multi_turn``: ``input_tokens`` omitted (a prompt is the conversation so far),
      ``output_tokens`` required, open-loop arrivals only (each arrival starts a session);
    - ``prefix: fixed_hit``: ``input_tokens`` and ``output_tokens`` required;
    - ``arrival: {kind: trace}``: ``input_tokens``, ``output_tokens`` and ``prefix`` omitted (the
      trace gives lengths and its own ``hash_ids``, if any).

    ``block_tokens`` is the block size of the prompts' ``hash_ids`` (default 16). With a trace it
    defaults to the trace's own (512 for mooncake, 16 for bailian), and any other value is refused:
    ids hashed over one block size mean nothing at another.

    ``timeout`` (seconds, default None: clients wait for ever) is how long a client waits for a
    whole answer: a request not finished that long after it was sent is aborted wherever it is
    and every KV page it holds comes back (as vLLM aborts a request whose connection closed). On a
    colocated system that is its instance (queued, computing, loading, decoding). On a
    disaggregated one it is the prefill instance (queued, computing, or holding the prompt for its
    handoff), the handoff (waiting for decode room, or its KV flow in flight, which is cancelled:
    the bytes it delivered stay counted), or the decode instance. A request whose last token is on
    its way to the client (``engine.output_s``) is aborted too; one already finished is not.
    """

    arrival: ArrivalSpec
    prefix: PrefixSpec | None = None
    input_tokens: LengthSpec | None = Field(default=None, validate_default=True)
    output_tokens: LengthSpec | None = Field(default=None, validate_default=True)
    block_tokens: PositiveInt = 16
    timeout: PositiveSeconds | None = None  # how long a client waits for a whole answer (see above)
    adapters: AdapterSpec | None = None  # LoRA adapters requests name (kvsim.workload.adapters)

    @model_validator(mode="before")
    @classmethod
    def _trace_block_size(cls, data: object) -> object:
        if isinstance(data, dict) and "block_tokens" not in data:
            native = native_block_tokens(data.get("arrival"))
            if native is not None:
                data = {**data, "block_tokens": native}
        return data

    @field_validator("prefix")
    @classmethod
    def _prefix_fits_arrival(cls, prefix: object, info: ValidationInfo) -> object:
        arrival = info.data.get("arrival")
        if prefix is not None and isinstance(arrival, TraceSpec):
            raise ValueError("must be omitted with a trace: the trace carries its own hash_ids (or none)")
        if prefix is not None and isinstance(arrival, PhasedArrivals):
            raise ValueError("must be omitted with phases: phased prompts carry no prefix structure")
        if isinstance(prefix, MultiTurn) and isinstance(arrival, ClosedLoop):
            raise ValueError("multi_turn sessions start by an open-loop arrival process (poisson or gamma), "
                             "not closed_loop")
        if isinstance(prefix, SharedDocuments) and prefix.order == "cyclic" and isinstance(arrival, ClosedLoop):
            raise ValueError("order: cyclic numbers an open loop's requests; closed_loop clients draw their "
                             "documents (order: popularity)")
        return prefix

    @field_validator("input_tokens")
    @classmethod
    def _input_source(cls, value: object, info: ValidationInfo) -> object:
        if "arrival" not in info.data or "prefix" not in info.data:
            return value  # already invalid; that error is reported
        arrival, prefix = info.data["arrival"], info.data["prefix"]
        if isinstance(arrival, PhasedArrivals):
            if value is not None:
                raise ValueError("must be omitted: each phase gives its own (arrival.phases[k].input_tokens)")
        elif isinstance(arrival, TraceSpec):
            if value is not None:
                raise ValueError("must be omitted: a trace gives every request's prompt length")
        elif isinstance(prefix, (SharedDocuments, MultiTurn)):
            if value is not None:
                what = "document + suffix" if isinstance(prefix, SharedDocuments) else "the conversation so far"
                raise ValueError(f"must be omitted: with prefix {prefix.kind} a prompt is {what}")
        elif value is None:
            raise ValueError("required (a length distribution, e.g. {kind: fixed, value: 1024})")
        return value

    @field_validator("output_tokens")
    @classmethod
    def _output_source(cls, value: object, info: ValidationInfo) -> object:
        if "arrival" not in info.data:
            return value
        if isinstance(info.data["arrival"], PhasedArrivals):
            if value is not None:
                raise ValueError("must be omitted: each phase gives its own (arrival.phases[k].output_tokens)")
        elif isinstance(info.data["arrival"], TraceSpec):
            if value is not None:
                raise ValueError("must be omitted: a trace gives every request's output length")
        elif value is None:
            raise ValueError("required (a length distribution, e.g. {kind: fixed, value: 1})")
        return value

    @field_validator("adapters")
    @classmethod
    def _adapters_fit_arrival(cls, value: object, info: ValidationInfo) -> object:
        if value is None:
            return value
        arrival, prefix = info.data.get("arrival"), info.data.get("prefix")
        if isinstance(arrival, (TraceSpec, PhasedArrivals)):
            raise ValueError(f"adapters are drawn for poisson, gamma, diurnal, stages and closed_loop arrivals, "
                             f"not {arrival.kind}")
        if isinstance(prefix, MultiTurn):
            raise ValueError("adapters with multi_turn sessions are not modelled; use shared_documents or "
                             "fixed_hit (the shared context) or no prefix")
        return value

    @field_validator("block_tokens")
    @classmethod
    def _trace_native(cls, value: int, info: ValidationInfo) -> int:
        arrival = info.data.get("arrival")
        if isinstance(arrival, TraceSpec) and arrival.block_tokens is not None and value != arrival.block_tokens:
            raise ValueError(f"a {arrival.format} trace hashes {arrival.block_tokens}-token blocks; "
                             f"block_tokens {value} would mix block sizes (omit it or give {arrival.block_tokens})")
        return value

    @property
    def closed_loop(self) -> bool:
        return isinstance(self.arrival, ClosedLoop)

    @property
    def trace(self) -> bool:
        """Requests are replayed from a trace file (``arrival: {kind: trace}``)."""
        return isinstance(self.arrival, TraceSpec)

    @property
    def phased(self) -> bool:
        """Requests arrive in phases (``arrival: {kind: phases}``)."""
        return isinstance(self.arrival, PhasedArrivals)

    @property
    def multi_turn(self) -> bool:
        """Requests are turns of sessions: drive them with :func:`kvsim.workload.sessions`."""
        return isinstance(self.prefix, MultiTurn)

    def prompt_lengths(self) -> LengthSpec:
        """The ``input_tokens`` distribution (ValueError where the workload gives none: a trace,
        phases, or a prefix that makes the prompt)."""
        if self.input_tokens is None:
            raise ValueError("this workload has no input_tokens distribution (its prompts come from its "
                             "trace, phases or prefix)")
        return self.input_tokens

    def output_lengths(self) -> LengthSpec:
        """The ``output_tokens`` distribution (ValueError for a trace or phases, which give their own)."""
        if self.output_tokens is None:
            raise ValueError("this workload has no output_tokens distribution (its trace or phases give them)")
        return self.output_tokens

    @property
    def has_hashes(self) -> bool:
        """Requests carry ``hash_ids`` (a prefix structure, or a trace that has them)."""
        if isinstance(self.arrival, TraceSpec):
            return self.arrival.block_tokens is not None
        return self.prefix is not None

    @property
    def max_output_tokens(self) -> int | None:
        """Longest possible output, or None for a trace (known only once it is loaded)."""
        if isinstance(self.arrival, PhasedArrivals):
            return self.arrival.max_tokens("output_tokens")
        return None if self.output_tokens is None else self.output_tokens.max_tokens

    @property
    def max_input_tokens(self) -> int | None:
        """Longest possible prompt, or None for a trace (known only once it is loaded)."""
        if isinstance(self.arrival, TraceSpec):
            return None
        if isinstance(self.arrival, PhasedArrivals):
            return self.arrival.max_tokens("input_tokens")
        if isinstance(self.prefix, SharedDocuments):
            return self.prefix.max_prompt_tokens
        if isinstance(self.prefix, MultiTurn):
            return self.prefix.max_prompt_tokens(self.output_lengths().max_tokens)
        return self.prompt_lengths().max_tokens


def open_loop_requests(
    spec: WorkloadSpec, duration_s: float, streams: RandomStreams, base_dir: str | Path | None = None,
    namespace: str = "",
) -> RequestArrays:
    """All requests arriving in ``[0, duration_s)`` for an open-loop workload.

    ``namespace`` keeps the unique parts of prompts apart from another request set's (e.g. a
    cache prewarm drawn from the same workload): equal request indices then mean different text.

    With a prefix structure the result carries ``hash_ids`` (and ``block_tokens``). With a trace
    arrival the trace is read (``base_dir`` resolves a relative ``file``) and cut at ``duration_s``;
    ``streams`` is then unused. ``multi_turn`` workloads are not a list of requests: use
    :func:`kvsim.workload.sessions`.
    """
    if isinstance(spec.arrival, ClosedLoop):
        raise ValueError("open_loop_requests needs an open-loop arrival process")
    if isinstance(spec.arrival, TraceSpec):
        requests = spec.arrival.load(base_dir)
        return requests.select(requests.arrival_s < duration_s)
    if isinstance(spec.arrival, PhasedArrivals):
        return spec.arrival.requests(duration_s, streams, base_dir)
    if spec.multi_turn:
        raise ValueError("a multi_turn workload is a set of sessions: use kvsim.workload.sessions()")
    arrival_s = open_loop_arrival_times(spec.arrival, duration_s, streams.generator("workload.arrival"))
    n = len(arrival_s)
    block = spec.block_tokens
    adapter = None if spec.adapters is None else spec.adapters.draw(streams.generator("workload.adapter"), n)
    if isinstance(spec.prefix, SharedDocuments):
        outputs = spec.output_lengths().sample(streams.generator("workload.output_tokens"), n)
        library = DocumentLibrary(spec.prefix, block, streams.generator("workload.prefix.document_tokens"))
        documents = library.choose(streams.generator("workload.prefix.document"), n)
        suffixes = spec.prefix.suffix_tokens.sample(streams.generator("workload.prefix.suffix_tokens"), n)
        inputs = np.empty(n, dtype=np.int64)
        hash_ids = []
        for i, (d, s) in enumerate(zip(documents.tolist(), suffixes.tolist())):
            inputs[i], ids = library.prompt(d, s, (namespace, i) if namespace else (i,))
            hash_ids.append(ids)
        shared_tokens = None if adapter is None else library.document_tokens[documents].astype(np.int64)
        return RequestArrays(arrival_s, inputs, outputs, hash_ids, block, adapter, shared_tokens)
    inputs = spec.prompt_lengths().sample(streams.generator("workload.input_tokens"), n)
    outputs = spec.output_lengths().sample(streams.generator("workload.output_tokens"), n)
    if isinstance(spec.prefix, FixedHit):
        shared = SharedPrefix(spec.prefix, block)
        hash_ids = [shared.prompt(tokens, (namespace, i) if namespace else (i,))
                    for i, tokens in enumerate(inputs.tolist())]
        shared_tokens = None if adapter is None else np.array(
            [spec.prefix.shared_blocks(t, block) * block for t in inputs.tolist()], dtype=np.int64)
        return RequestArrays(arrival_s, inputs, outputs, hash_ids, block, adapter, shared_tokens)
    shared_tokens = None if adapter is None else np.zeros(n, dtype=np.int64)
    return RequestArrays(arrival_s, inputs, outputs, adapter=adapter, shared_tokens=shared_tokens)


class ClientRequest(NamedTuple):
    """One closed-loop request: pause before sending it, lengths, and its prompt's block ids.

    ``hash_ids`` is None when the workload has no prefix structure (every prompt unique).
    """

    think_time_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: np.ndarray | None
    adapter: int = -1        # LoRA adapter it names (-1: the base model)
    shared_tokens: int = 0   # leading prompt tokens of shared context (document or shared prefix)


class ClientStream:
    """The request sequence of one closed-loop client: think time (s), prompt and output tokens.

    Client ``i`` always draws the same sequence for the same root seed, whatever the system
    serving it, so systems compared side by side see the same requests per client.

    ``next_request()`` returns ``(think_time_s, input_tokens, output_tokens)``;
    ``next_request_with_hashes()`` returns a :class:`ClientRequest` that adds the prompt's
    ``hash_ids`` (block size ``spec.block_tokens``). Each call of either consumes one request of the
    same sequence: a simulator that models prefix caching calls the second, others the first.
    """

    _CHUNK = 64

    def __init__(self, spec: WorkloadSpec, client: int, streams: RandomStreams, namespace: str = ""):
        if not isinstance(spec.arrival, ClosedLoop):
            raise ValueError("ClientStream needs a closed-loop arrival process")
        self._spec = spec
        self._arrival: ClosedLoop = spec.arrival
        self._client = int(client)
        self._namespace = namespace  # keeps unique prompt parts apart from another request set's
        self._rng = streams.generator(f"workload.client.{client}")
        self._adapter_rng = (streams.generator(f"workload.adapter.client.{client}")
                             if spec.adapters is not None else None)
        self._buffer: list[tuple[float, int, int, int | None, int | None]] = []  # think, in, out, document, suffix
        self._first = True
        self._sent = 0
        self._library: DocumentLibrary | None = None
        self._shared: SharedPrefix | None = None
        if isinstance(spec.prefix, SharedDocuments):
            self._library = DocumentLibrary(spec.prefix, spec.block_tokens,
                                            streams.generator("workload.prefix.document_tokens"))
            self._prefix_rng = streams.generator(f"workload.prefix.client.{client}")
        elif isinstance(spec.prefix, FixedHit):
            self._shared = SharedPrefix(spec.prefix, spec.block_tokens)

    def _refill(self) -> None:
        n = self._CHUNK
        think = self._arrival.think_times(self._rng, n)
        prefix = self._spec.prefix
        rows: Iterable[tuple[float, int, int, int | None, int | None]]
        if self._library is None or not isinstance(prefix, SharedDocuments):  # (a library: shared documents)
            inputs = self._spec.prompt_lengths().sample(self._rng, n)
            outputs = self._spec.output_lengths().sample(self._rng, n)
            rows = zip(think.tolist(), inputs.tolist(), outputs.tolist(), [None] * n, [None] * n)
        else:
            outputs = self._spec.output_lengths().sample(self._rng, n)
            documents = self._library.choose(self._prefix_rng, n)
            suffixes = prefix.suffix_tokens.sample(self._prefix_rng, n)
            inputs = self._library.document_tokens[documents] + suffixes
            rows = zip(think.tolist(), inputs.tolist(), outputs.tolist(), documents.tolist(), suffixes.tolist())
        self._buffer = list(rows)[::-1]
        adapters = self._spec.adapters
        if self._adapter_rng is not None and adapters is not None:  # (the stream exists with adapters only)
            self._adapters = adapters.draw(self._adapter_rng, n).tolist()[::-1]

    def _next(self) -> tuple[float, int, int, int | None, int | None, int]:
        if not self._buffer:
            self._refill()
        think_s, n_in, n_out, document, suffix = self._buffer.pop()
        self._adapter = self._adapters.pop() if self._adapter_rng is not None else -1
        if self._first:
            self._first = False
            think_s = 0.0
        index = self._sent
        self._sent += 1
        return think_s, n_in, n_out, document, suffix, index

    def next_request(self) -> tuple[float, int, int]:
        """``(think_time_s, input_tokens, output_tokens)`` of the client's next request.

        The first request of each client is sent at time 0 (no think time).
        """
        think_s, n_in, n_out, _, _, _ = self._next()
        return think_s, n_in, n_out

    def next_request_with_hashes(self) -> ClientRequest:
        """The client's next request with its prompt's block ids (None without a prefix structure)."""
        think_s, n_in, n_out, document, suffix, index = self._next()
        key = ("client", self._client, index) if not self._namespace else (
            self._namespace, "client", self._client, index)
        hash_ids, shared_tokens = None, 0
        prefix = self._spec.prefix
        if self._library is not None and document is not None and suffix is not None:  # (drawn with a library)
            _, hash_ids = self._library.prompt(document, suffix, key)
            shared_tokens = int(self._library.document_tokens[document])
        elif self._shared is not None and isinstance(prefix, FixedHit):  # (a shared prefix: fixed_hit)
            hash_ids = self._shared.prompt(n_in, key)
            shared_tokens = prefix.shared_blocks(n_in, self._spec.block_tokens) * self._spec.block_tokens
        return ClientRequest(think_s, n_in, n_out, hash_ids, self._adapter, shared_tokens)
