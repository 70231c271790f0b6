"""Admission-time lookup and loads: where a prompt's cached prefix comes from, and the flows that
bring the blocks not already in this instance's HBM -- one flow per source (store, and holding
instance for a peer's HBM) and card, never one per block. Which stores an instance may use and
how they rank is :class:`~kvsim.serving.cache.access.CacheAccess`'s to say."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import compress, count, repeat
from operator import is_not
from typing import TYPE_CHECKING, Any

import simpy

from kvsim.kv import BlockStore
from kvsim.serving.cache.domain_pool import DomainPoolBase
from kvsim.serving.cache.member import CacheMember
from kvsim.serving.scheduler import Sequence

if TYPE_CHECKING:
    from kvsim.serving.cache.tiers import SystemCache

__all__ = ["PrefixLoader", "SeqCache"]


@dataclass
class SeqCache:
    """What one admission of a sequence holds in the cache, and what it will record."""

    blocks: list = field(default_factory=list)  # HBM blocks it reads (reader references)
    hits: dict[str, int] = field(default_factory=dict)  # tier -> tokens, recorded on commit
    loaded_bytes: float = 0.0
    remote_from: dict = field(default_factory=dict)  # peer holding blocks it reads in place -> tokens


class PrefixLoader:
    """Finds the longest cached prefix of a prompt among the stores an instance can reach (its own
    HBM, its node's DRAM and NVMe, the remote pool, and with ``peer_hbm`` other instances' HBM),
    keeps the blocks already in its HBM (shared pages, no copy) and loads the others.

    Parameters
    ----------
    cache : CacheMember
        The instance's cache, whose state (HBM store, pool, blocks in flight) this reads.
    system : SystemCache
    domain_pool : DomainPoolBase or None
        The instance's addressing domain's pool with ``peer_hbm: read_in_place``, else None.
    recompute_s : callable
        ``recompute_s(tokens, cached_tokens)``: one prefill iteration's time, for the ``faster``
        policy, which compares loading a hit with the extra time recomputing it adds to the
        suffix's prefill.
    next_step_tokens : callable
        ``next_step_tokens(seq, cached_tokens)``: the tokens of ``seq``'s first step after
        ``cached_tokens`` cached ones (the scheduler's).
    read_remote_run : callable
        ``read_remote_run(seq, blocks)``: ``seq`` reads ``blocks`` of its domain in place; returns
        how many a peer holds
        (:meth:`~kvsim.serving.cache.instance_cache.InstanceCache.read_remote_run`).
    after_load : callable
        ``after_load(seq, state, ungate)``: the KV an admission waited for has landed.
    write_down : callable
        ``write_down(seq, blocks, only=store)``: the instance's writer copying ``blocks`` down
        (:meth:`~kvsim.serving.cache.writer.CacheWriter.write_down`).
    """

    def __init__(self, cache: CacheMember, system: SystemCache, domain_pool: DomainPoolBase | None,
                 recompute_s: Callable[[int, int], float], next_step_tokens: Callable[[Sequence, int], int],
                 read_remote_run: Callable[[Sequence, Any], int],
                 after_load: Callable[[Sequence, SeqCache | None, bool], None],
                 write_down: Callable[..., None]):
        self.cache = cache
        self.system = system
        self.access = system.access
        self.domain_pool: Any = domain_pool  # (DomainPool, or ExtentDomainPool for extents)
        self.recompute_s = recompute_s
        self.next_step_tokens = next_step_tokens
        self.read_remote_run = read_remote_run
        self.after_load = after_load
        self.write_down = write_down

    def admit(self, seq: Sequence) -> str | None:
        """Prepare the admission of ``seq`` (which has prefix hashes); see AdmissionHook.admit."""
        cache, system = self.cache, self.system
        g = cache.geometry
        index = system.index
        usable, rank = self.access.usable(cache), self.access.rank(cache)
        # at least one token is always computed: the last prompt block is never a hit
        eligible = min(seq.prompt_tokens // g.block_tokens, (seq.prefill_target - 1) // g.block_tokens)
        # the blocks that may hit, as a list of Python ints: the same ids, quicker to walk and to
        # look up than a NumPy array's scalars (and the same keys the run calls file)
        hashes = seq.hashes[:max(eligible, 0)]
        hashes = hashes.tolist() if hasattr(hashes, "tolist") else list(hashes)
        n = index.longest_prefix(hashes, usable) if eligible > 0 else 0
        found = n  # the cached prefix the lookup found (the load policy may load less of it)
        sources = index.tier_breakdown(hashes, n, rank, usable) if n else []
        hbm = cache.hbm
        # the leading run already in this HBM: the position of the first other source, if any
        local = next(compress(count(), map(is_not, sources, repeat(hbm))), n)
        if n > local and system.spec.load_policy == "faster":
            # Recomputing the blocks below HBM costs the extra prefill time they add to the
            # suffix that must be computed anyway; if that beats the uncontended load time,
            # keep only the leading run already in this HBM.
            suffix = seq.prefill_target - n * g.block_tokens
            extra = (n - local) * g.block_tokens
            marginal_s = (self.recompute_s(extra + suffix, local * g.block_tokens)
                          - self.recompute_s(suffix, n * g.block_tokens))
            if marginal_s <= self._estimated_load_s([(s, 1) for s in sources[local:n] if s is not hbm]):
                n = local
        held = []
        pending: dict[int, simpy.Event] = {}
        to_load = []  # (block, source store, the id it has there)
        if local:
            # the leading run already in this HBM: hit and read as one run
            run = hashes[:local]
            hbm.read_run(run)
            held.extend(run)
            inflight = cache.inflight
            if inflight:
                for block in run:
                    event = inflight.get(block)
                    if event is not None:
                        pending[id(event)] = event
        for k in range(local, n):
            block = hashes[k]
            source = sources[k]
            if source is not hbm:
                to_load.append((block, source, block))
                continue
            hbm.lookup(block)
            hbm.add_reader(block)
            held.append(block)
            event = cache.inflight.get(block)
            if event is not None:
                pending[id(event)] = event
        if seq.value_keys is not None and n == len(sources):  # (not cut short by the load policy)
            copies = self._value_copies(seq, n, eligible, usable, rank)
            to_load += copies
            n += len(copies)
        local_sources = [source_id for _, store, source_id in to_load if store is hbm]
        for source_id in local_sources:  # another adapter's copy in this HBM: making room must not evict it
            hbm.lookup(source_id)
            hbm.pin(source_id)
        # A sequence parked until its prefix lands (load_mode: before) joins the running ones
        # then, behind the admissions since: its first chunk's pages are taken now, as an
        # admission that computes at once takes them, or on a full pool it would land and have to
        # preempt another to grow (or be preempted) before taking a step.
        first_pages = 0
        if system.spec.load_mode == "before" and (to_load or pending):
            first_pages = cache.pool.blocks_for(self.next_step_tokens(seq, n * g.block_tokens))
        pages = len(to_load) * g.pages_per_block + first_pages
        if pages and not cache.pool.take(pages):
            hbm.drop_reader_each(held)
            for source_id in local_sources:
                hbm.unpin(source_id)
            return None
        if found and system.has_lower:
            # the lookup refreshes the copies it found below HBM (SystemCache.touch_below)
            system.touch_below(cache.node, hashes[:found], to_load)
        state = SeqCache(blocks=held)
        seq.cache = state
        seq.kv_blocks = first_pages  # its own pages (the loaded blocks' pages belong to the cache)
        seq.remote_tokens = 0
        # read in place: the blocks already in the domain are read where they are (no pages)
        remote = self.read_remote_run(seq, held) if self.domain_pool is not None else 0
        state.hits["hbm"] = (n - len(to_load) - remote) * g.block_tokens
        if remote:
            state.hits["peer_hbm"] = remote * g.block_tokens
        domain = self.domain_pool
        if to_load:
            # the copies land in this HBM, read by the sequence; the transfer pins them until the
            # bytes are there
            run = [block for block, _, _ in to_load]
            filed = index.insert_run(hbm, run, read=True)
            if filed.done < len(run) or (filed.evicted and domain is not None):
                raise RuntimeError("HBM cache index refused a block it had pages for")
            if domain is not None:
                domain.homed_run(run, cache)
            hbm.pin_each(run)
            held.extend(run)
        seq.kv_tokens = seq.shared_tokens = n * g.block_tokens
        waits = list(pending.values())
        if to_load:
            waits.append(self._load(state, to_load))
        return self._wait(seq, state, waits)

    def _wait(self, seq: Sequence, state: SeqCache, waits: list) -> str:
        """What the admission of ``seq`` waits for (``waits``: the loads and copies still landing
        that its prefix needs): ``run`` at once, ``load`` once they land (``load_mode: before``),
        or ``run`` gated, its first token after the last layer's share (layer by layer)."""
        if not waits:
            return "run"
        cache, system = self.cache, self.system
        env = system.env
        done = waits[0] if len(waits) == 1 else simpy.AllOf(env, waits)
        if system.spec.load_mode == "before":
            after_load = self.after_load
            done.callbacks.append(lambda _event: after_load(seq, state, False))
            return "load"
        seq.gated = True
        started = env.now
        num_layers = cache.geometry.num_layers

        def layer_tail(_event):
            # layer-by-layer: the last layer's compute waits for that layer's share of the load
            tail_s = (env.now - started) / num_layers
            env.process(self._ungate_after(seq, state, tail_s))

        done.callbacks.append(layer_tail)
        return "run"

    def _value_copies(self, seq: Sequence, n: int, eligible: int, usable, rank) -> list:
        """LoRA value reuse: after the blocks cached under the request's own adapter, each next
        block of its shared context that another adapter (or the base model) has computed, as
        ``(own id, source store, id there)``: the value is copied into a block of its own."""
        index, keys = self.system.index, seq.value_keys
        limit = min(len(keys), eligible)
        out = []
        for k, row in enumerate(keys[n:limit].tolist(), start=n):
            found = None
            for key in row:
                stores = [store for store in index.locations(key) if usable(store)]
                if stores:  # the cheapest place it sits (the earliest of equals)
                    found = (seq.hashes[k], min(stores, key=rank), key)
                    break
            if found is None:
                break
            out.append(found)
        return out

    def _ungate_after(self, seq: Sequence, state: SeqCache, delay_s: float):
        yield self.system.env.timeout(delay_s)
        self.after_load(seq, state, True)

    def _estimated_load_s(self, sources: list[tuple[BlockStore, int]]) -> float:
        """Uncontended time to load blocks from ``sources`` (``(store, blocks)`` stretches):
        every card's flow at once, so a link the ``tp`` flows share (a NIC) carries all of them;
        the slowest source decides."""
        counts: dict[int, tuple[BlockStore, int]] = {}
        for store, blocks in sources:
            entry = counts.get(id(store))
            counts[id(store)] = (store, (entry[1] if entry else 0) + blocks)
        worst = 0.0
        for store, total in counts.values():
            worst = max(worst, self.access.block_load_s(self.cache, store, total))
        return worst

    def _copy_from(self, holder, blocks: list, nbytes: float) -> simpy.Event:
        """Copy ``blocks`` from ``holder``'s HBM into this instance, card by card, once any of them
        still landing in ``holder`` has landed (its bytes are not there before)."""
        env, transfers = self.system.env, self.system.transfers
        paths = self.access.peer_paths(holder, self.cache)
        landing = [e for e in dict.fromkeys(holder.inflight.get(b) for b in blocks) if e is not None]
        if not landing:
            return transfers.move(paths, nbytes, "peer_copy")

        def after_landing():
            yield simpy.AllOf(env, landing)
            yield transfers.move(paths, nbytes, "peer_copy")

        return env.process(after_landing())

    def _groups(self, to_load: list) -> dict:
        """``to_load``'s source ids grouped by source: ``(id(store), id(holder)) -> (store, holder,
        kind, ids)`` as :meth:`CacheAccess.source` names each block's source, the groups in the
        order their first block comes, each one's ids in order. Worked out once per stretch of
        blocks with one source (one store; for another domain's shared store, one home too)."""
        cache, access = self.cache, self.access
        groups: dict[tuple[int, int], tuple[BlockStore, object, str, list]] = {}
        tier_of, pools = self.system.tier_of, access.pools
        last, group = None, None  # the previous block's store, and its group if every block there has one
        home = last_home = None  # another domain's shared store: its homes, the previous block's holder
        for _block, store, source_id in to_load:
            if store is last:
                if home is None:
                    group.append(source_id)
                    continue
                if home[source_id] is last_home:  # (the same store and holder: the same source)
                    group.append(source_id)
                    continue
            kind, holder = access.source(cache, store, source_id)
            entry = groups.setdefault((id(store), id(holder)), (store, holder, kind, []))
            entry[3].append(source_id)
            # a store's blocks share one source, but those of another domain's shared store
            # (read in place there) each have their own home, hence their own holder
            last, group = store, entry[3]
            if tier_of[id(store)] != "hbm" or store is cache.hbm or id(store) not in pools:
                home = None
            else:
                home, last_home = pools[id(store)].home, holder
        return groups

    def _read_below(self, store, tier: str, nbytes: float) -> simpy.Event:
        """Start loading ``nbytes`` per card from ``store``, a tier below HBM, into this instance:
        once per node, the readers handing the bytes on card to card; counted as loaded from
        ``tier``. The returned event fires when they have landed."""
        cache, system = self.cache, self.system
        reads, hops = self.access.load_routes(cache, store)
        system.count(system.bytes_loaded, tier, nbytes * len(reads))
        io = system.io(store, False, cache.node, cache.geometry.block_bytes_per_card)
        done = system.transfers.move(reads, nbytes, "cache_load", io)
        if hops:
            done = simpy.AllOf(system.env, [done, system.transfers.move(hops, nbytes, "fanout")])
        return done

    def _count_peer_read(self, tier: str, nbytes: float) -> None:
        """Count ``nbytes`` per card copied from a peer's HBM (``tier``: its domain or another)."""
        system, tp = self.system, self.cache.geometry.tp
        system.count(system.bytes_loaded, tier, nbytes * tp)
        if tier == "other_domain":
            system.count_cross_domain(nbytes * tp)

    def _load(self, state: SeqCache, to_load: list) -> simpy.Event:
        """Start the flows that bring ``to_load`` into HBM; the returned event fires when all land."""
        cache, system = self.cache, self.system
        g = cache.geometry
        groups = self._groups(to_load)
        events = []
        for store, holder, tier, blocks in groups.values():
            if store is not cache.hbm:  # (a copy inside this HBM pinned its source at admission)
                store.lookup_pin_run(blocks)
            nbytes = len(blocks) * g.block_bytes_per_card
            state.hits[tier] = state.hits.get(tier, 0) + len(blocks) * g.block_tokens
            state.loaded_bytes += nbytes * g.tp
            if store is cache.hbm:  # another adapter's copy in this HBM: a copy inside the card
                group_done = system.env.timeout(nbytes / cache.local_copy_Bps)
            elif holder is None:
                group_done = self._read_below(store, tier, nbytes)
            else:
                self._count_peer_read(tier, nbytes)
                group_done = self._copy_from(holder, blocks, nbytes)

            def unpin_source(_event, store=store, blocks=blocks):
                if system.pending_reclaims:
                    system.settle_reclaims()
                store.unpin_each(blocks)

            group_done.callbacks.append(unpin_source)
            events.append(group_done)
        done = events[0] if len(events) == 1 else simpy.AllOf(system.env, events)
        loaded = [b for b, _, _ in to_load]
        for block in loaded:
            cache.inflight[block] = done
        promote = [b for b, store, _ in to_load if system.tier_of[id(store)] in ("nvme", "remote")]

        def landed(_event):
            if system.pending_reclaims:
                system.settle_reclaims()
            cache.hbm.unpin_each(loaded)
            inflight = cache.inflight
            for block in loaded:
                if inflight.get(block) is done:
                    del inflight[block]
            if promote and system.spec.promote_on_hit:
                self._promote(promote)

        done.callbacks.insert(0, landed)
        return done

    def _promote(self, blocks: list) -> None:
        """File blocks just loaded from NVMe or the pool in this node's DRAM tier too."""
        dram = self.system.dram.get(self.cache.node)
        if dram is None:
            return
        missing = [b for b in blocks if b not in dram]
        if not missing:
            return
        if not self.system.spec.gpu_direct:
            self.system.file(dram, missing)  # the bounce staged these bytes in host DRAM already
            return
        self.write_down(None, missing, only=dram)
