"""Named, independent random streams derived from one root seed.

Each component asks for its stream by a stable name (``"workload.arrival"``,
``"workload.client.3"``). The stream's seed is derived from the root seed *and the name*,
not from the order in which streams are requested, so adding a component never shifts
another component's draws. Same root seed + same name = the same sequence, bit for bit.
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["RandomStreams", "DerivedStreams", "replica_seed"]


def _name_key(name: str) -> tuple[int, ...]:
    digest = hashlib.blake2b(name.encode("utf-8"), digest_size=16).digest()
    return tuple(int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4))


class RandomStreams:
    """Factory of independent ``numpy.random.Generator`` streams keyed by name.

    Parameters
    ----------
    seed : int
        The scenario's root seed (non-negative).

    Examples
    --------
    >>> streams = RandomStreams(7)
    >>> a = streams.generator("workload.arrival").random()
    >>> a == RandomStreams(7).generator("workload.arrival").random()
    True
    """

    def __init__(self, seed: int):
        if seed < 0:
            raise ValueError(f"seed must be non-negative, got {seed}")
        self.seed = int(seed)

    def generator(self, name: str) -> np.random.Generator:
        """A fresh generator for stream ``name``; calling twice restarts the same sequence."""
        sequence = np.random.SeedSequence(entropy=self.seed, spawn_key=_name_key(name))
        return np.random.Generator(np.random.PCG64(sequence))


class DerivedStreams(RandomStreams):
    """The streams of ``parent`` under a name prefix: same names, independent draws.

    ``DerivedStreams(streams, "prewarm").generator("workload.arrival")`` is the parent's stream
    ``"prewarm.workload.arrival"``: a workload generated from it follows the same distributions
    as the real one without repeating its requests. Names in ``shared`` (e.g. the stream that
    decides which documents exist) stay the parent's.
    """

    def __init__(self, parent: RandomStreams, prefix: str, shared: tuple[str, ...] = ()):
        super().__init__(parent.seed)
        self.parent = parent
        self.prefix = prefix
        self.shared = shared  # names that stay the parent's: the world both draw from

    def generator(self, name: str) -> np.random.Generator:
        if name in self.shared:
            return self.parent.generator(name)
        return self.parent.generator(f"{self.prefix}.{name}")


def replica_seed(seed: int, replica: int) -> int:
    """Root seed of replication ``replica`` of a point whose root seed is ``seed``.

    Replica 0 keeps ``seed`` itself, so a run with ``replications: 1`` (the default) draws what
    it always drew. Replica ``r > 0`` takes a 63-bit seed from ``SeedSequence(seed,
    spawn_key=(r,))``: numpy's spawned sequences are designed to be independent of the parent
    and of each other, and the result depends only on ``(seed, r)``, never on which process or
    in which order replicas run.
    """
    if replica < 0:
        raise ValueError(f"replica must be non-negative, got {replica}")
    if replica == 0:
        return int(seed)
    words = np.random.SeedSequence(entropy=int(seed), spawn_key=(int(replica),)).generate_state(2, np.uint32)
    return int(words[0]) | (int(words[1] & 0x7FFFFFFF) << 32)
