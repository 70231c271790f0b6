"""A shadow of every domain store of a run: each call a :class:`DomainStore` receives is done
again on an :class:`~kvsim.kv.extents.ExtentStore` whose blocks are the same ids addressed as
``(chain, position)`` (from :func:`~kvsim.workload.reuse.prompt_segments` of every prompt the
workload builds), and the answers and states are compared -- the extent store on the real access
sequence of a scenario, not only on random ones. Used by ``tests/test_kv_extents_shadow.py`` and
to measure how many extents a run keeps (docs/extents.md, "Phase 4: extents")."""

from __future__ import annotations

from contextlib import contextmanager
from unittest import mock

from kvsim.kv.extents import ExtentStore
from kvsim.serving.cache.domain_pool import DomainStore
from kvsim.workload import reuse


class Shadow:
    """The id <-> address tables, the shadows, and what was seen."""

    def __init__(self, check_every: int = 1):
        self.address: dict[int, tuple] = {}
        self.block: dict[tuple, int] = {}
        self.shadows: list[tuple[DomainStore, ExtentStore]] = []
        self.check_every = check_every
        self.calls = 0
        self.by_name: dict[str, int] = {}  # calls per method: the domain stores' call surface
        self.stretches = 0
        self.blocks = 0
        self.peak_blocks = 0        # the largest store's blocks at its fullest check
        self.peak_extents = 0       # and the most extents any store kept at a check
        self.ratio_at_peak = None

    def prompt(self, ids) -> None:
        """Record the addresses of a prompt's blocks."""
        block_tokens = self.block_tokens
        segments = reuse.prompt_segments(ids, block_tokens)
        if segments is None:
            raise AssertionError("a prompt without document segments: the shadow needs addresses")
        for key, chain, start, end in segments:
            for position in range(start, end):
                block = int(chain[position])
                assert self.address.setdefault(block, (key, position)) == (key, position)
                self.block[(key, position)] = block

    def stretches_of(self, blocks) -> list[tuple]:
        """``blocks`` (ids) as ``(chain, start, stop)`` stretches, in order."""
        out: list[list] = []
        for block in blocks:
            chain, position = self.address[int(block)]
            if out and out[-1][0] == chain and out[-1][2] == position:
                out[-1][2] += 1
            else:
                out.append([chain, position, position + 1])
        self.stretches += len(out)
        self.blocks += len(blocks)
        return [tuple(s) for s in out]

    def ids(self, stretches) -> list[int]:
        return [self.block[(chain, p)] for chain, a, b in stretches for p in range(a, b)]

    def compare(self, store: DomainStore, ext: ExtentStore) -> None:
        assert [self.block[b] for b in ext.blocks()] == list(store._policy.in_order())
        readers = {self.block[(e.chain, p)]: e.readers for e in ext.extents() if e.readers
                   for p in range(e.start, e.end)}
        pins = {self.block[(e.chain, p)]: e.pins for e in ext.extents() if e.pins for p in range(e.start, e.end)}
        assert readers == store._readers and pins == store._pins
        for name in ("hits", "misses", "insertions", "evictions", "removals", "rejections", "used_blocks",
                     "reader_refs"):
            assert getattr(ext, name) == getattr(store, name), name
        if ext.used_blocks >= self.peak_blocks:
            self.peak_blocks = ext.used_blocks
            self.ratio_at_peak = ext.used_blocks / max(ext.extent_count, 1)
        self.peak_extents = max(self.peak_extents, ext.extent_count)


def _outcome(call):
    try:
        return "ok", call()
    except (KeyError, ValueError) as exc:
        return type(exc).__name__, exc.args[0] if isinstance(exc, KeyError) else None


@contextmanager
def shadowed(block_tokens: int, check_every: int = 1):
    """Within the block, every domain store built is shadowed and checked (see the module)."""
    shadow = Shadow(check_every)
    shadow.block_tokens = block_tokens
    real_prompt = reuse.DocumentLibrary.prompt

    def prompt(self, document, suffix_tokens, key):
        tokens, ids = real_prompt(self, document, suffix_tokens, key)
        shadow.prompt(ids)
        return tokens, ids

    real_init = DomainStore.__init__

    def init(self, name, capacity_bytes, block_bytes, policy, pool):
        real_init(self, name, capacity_bytes, block_bytes, policy, pool)
        assert policy == "lru"
        self._shadow = ExtentStore(name, self.capacity_blocks)
        shadow.shadows.append((self, self._shadow))

    def mirrored(name, run):
        real = getattr(DomainStore, name)

        def call(self, *args):
            ext = self._shadow
            if run:
                stretches = shadow.stretches_of(args[0])
            error = None
            try:
                got = ("ok", real(self, *args))
            except (KeyError, ValueError) as exc:
                error = exc
                got = (type(exc).__name__, exc.args[0] if isinstance(exc, KeyError) else None)
            if name == "insert_run":
                read, touch = (list(args[1:]) + [False, True][len(args) - 1:])[:2]
                done, new_at, evicted, offset = 0, [], [], 0
                for chain, a, b in stretches:
                    d, new, ev = ext.insert_run(chain, a, b, read, touch)
                    new_at += [offset + p - a for s, e in new for p in range(s, e)]
                    evicted += [(offset + c + k - a, shadow.block[(vc, vs + k)])
                                for c, vc, vs, ve in ev for k in range(ve - vs)]
                    done += d
                    offset += b - a
                    if d < b - a:
                        break
                want = ("ok", (done, new_at, evicted))
                assert (got[0], tuple(got[1]) if got[0] == "ok" else got[1]) == want
            elif run:
                method = {"read_run": ext.read_run, "lookup_pin_run": ext.lookup_pin_run,
                          "drop_reader_each": ext.drop_reader_each, "pin_each": ext.pin_each,
                          "unpin_each": ext.unpin_each, "add_reader_each": ext.add_reader_each}[name]

                def each():
                    total = 0
                    for chain, a, b in stretches:
                        total += method(chain, a, b) or 0
                    return total if name == "read_run" else None

                want = _outcome(each)
                if want[0] == "KeyError":
                    want = ("KeyError", shadow.block[want[1]])
                assert got == want, (name, got, want)
            elif name == "evict_one":
                victim = ext.evict_one()
                assert got == ("ok", None if victim is None else shadow.block[victim])
            elif name == "evict_run":
                assert got == ("ok", shadow.ids(ext.evict_run(args[0])))
            else:  # one block: lookup, pin, unpin, add_reader, drop_reader, remove
                chain, p = shadow.address[int(args[0])]
                op = {"lookup": lambda: ext.lookup((chain, p)),
                      "pin": lambda: ext.pin_each(chain, p, p + 1),
                      "unpin": lambda: ext.unpin_each(chain, p, p + 1),
                      "add_reader": lambda: ext.add_reader_each(chain, p, p + 1),
                      "drop_reader": lambda: ext.drop_reader_each(chain, p, p + 1),
                      "remove": lambda: ext.remove((chain, p))}[name]
                want = _outcome(op)
                assert got[0] == want[0], (name, got, want)
            shadow.calls += 1
            shadow.by_name[name] = shadow.by_name.get(name, 0) + 1
            if shadow.calls % shadow.check_every == 0:
                shadow.compare(self, ext)
            if error is not None:
                raise error
            return got[1]

        return call

    runs = ("insert_run", "read_run", "lookup_pin_run", "drop_reader_each", "pin_each", "unpin_each",
            "add_reader_each")
    singles = ("lookup", "pin", "unpin", "add_reader", "drop_reader", "remove", "evict_one", "evict_run")
    patches = [mock.patch.object(reuse.DocumentLibrary, "prompt", prompt),
               mock.patch.object(DomainStore, "__init__", init)]
    patches += [mock.patch.object(DomainStore, n, mirrored(n, n in runs)) for n in runs + singles]
    for p in patches:
        p.start()
    try:
        yield shadow
        for store, ext in shadow.shadows:
            shadow.compare(store, ext)
    finally:
        for p in reversed(patches):
            p.stop()
