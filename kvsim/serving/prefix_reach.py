"""How much of a prompt's prefix each candidate instance can reach, from one walk of its blocks.

An instance can load a cached block from its own HBM, from its node's DRAM and NVMe tiers and
from the remote pool (the stores :class:`~kvsim.serving.cache.prefix_loader.PrefixLoader`
reads), and only a leading run of blocks is usable (block k needs blocks 0..k-1). For routing,
each instance's reachable run is worth a *credit*: per block, the weight of the tier the loader
would take it from (the fastest that holds it: own HBM, then node DRAM, node NVMe, remote).

Scanning the prompt once per instance costs instances x blocks per arrival. :func:`reach`
walks the prompt's blocks once and, per block, touches only the stores holding it:

- while the remote pool holds every block so far, every candidate still reaches the prefix; a
  block's credit is kept as offsets -- a base every candidate gets (the remote weight), a
  per-node offset for the candidates on a node whose DRAM/NVMe holds the block, and a
  per-instance offset for a candidate whose own HBM holds it -- so no per-candidate work is done;
- at a block the pool lacks (a *cut*), the candidates that still reach it are listed from the
  block's holders (its HBM owners and the candidates on holding nodes) and become the live set;
  a candidate left out stops there. Who stopped where is not recorded at the cut (that would
  scan the candidates): each candidate's depth is the first cut after the last one it survived,
  and its credit is read at that depth from the offsets' running sums.

Work per arrival is O(blocks + index entries of those blocks x candidates per node + candidates),
and the result is the per-instance scan's exactly (checked against it on random cases in the
tests). Decisions are taken over candidate positions; no set is iterated.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from kvsim.kv import BlockStore

__all__ = ["CacheLayout", "reach", "reach_segments"]

_HBM, _NODE, _REMOTE = 0, 1, 2


@dataclass
class CacheLayout:
    """Which stores the candidate instances read, and what each tier's block is worth.

    Parameters
    ----------
    hbm : list of BlockStore or None
        Candidate ``k``'s own HBM store (None: it caches nothing of its own). Candidates that
        share one (the members of an addressing domain whose HBM is one pool, ``peer_hbm:
        read_in_place``) each own what it holds: any of them reads it without a load.
    nodes : list of str or None
        Candidate ``k``'s compute node (its DRAM and NVMe tiers).
    node_stores : dict
        Node -> ``[(store, rank, credit), ...]``: that node's DRAM / NVMe stores, their tier
        rank (lower is read first) and credit per block.
    remote : list of BlockStore
        The remote pool's stores (every candidate reads them).
    hbm_credit, remote_credit : float
        Credit per block found in a candidate's own HBM / in the pool.
    """

    hbm: list[BlockStore | None]
    nodes: list[str | None]
    node_stores: dict[str, list[tuple[BlockStore, int, float]]]
    remote: list[BlockStore]
    hbm_credit: float
    remote_credit: float
    info: dict[int, tuple[int, object, int, float]] = field(init=False)
    members: dict[str, list[int]] = field(init=False)

    def __post_init__(self) -> None:
        if len(self.hbm) != len(self.nodes):
            raise ValueError("one HBM store and one node per candidate")
        self.members = {}
        for k, node in enumerate(self.nodes):
            if node is not None:
                self.members.setdefault(node, []).append(k)
        # id(store) -> (kind, key, rank, credit); only stores some candidate reads. An HBM
        # store's key is the candidates it belongs to, in order (several: a domain's shared store)
        self.info = {}
        owners: dict[int, list[int]] = {}
        for k, store in enumerate(self.hbm):
            if store is not None:
                owners.setdefault(id(store), []).append(k)
        for key, ks in owners.items():
            self.info[key] = (_HBM, tuple(ks), 0, self.hbm_credit)
        for node, stores in self.node_stores.items():
            if node in self.members:
                for store, rank, credit in stores:
                    self.info[id(store)] = (_NODE, node, rank, credit)
        for store in self.remote:
            self.info[id(store)] = (_REMOTE, None, 0, self.remote_credit)

    @property
    def size(self) -> int:
        return len(self.hbm)


def _cut(depth: int, holders: list[int], everyone: bool, alive: dict[int, None], cuts: list[int],
         survived: dict[int, int]) -> dict[int, None]:
    """A cut at ``depth``: the candidates among ``holders`` (in order) that are still alive
    (all are while ``everyone``) survive it; returns them, the new live set."""
    survivors: dict[int, None] = {}
    for k in holders:
        if everyone or k in alive:
            survivors[k] = None
    cuts.append(depth)
    for k in survivors:
        survived[k] = len(cuts) - 1
    return survivors


def reach(hashes: Sequence[Hashable], n: int, locations: Callable[[Hashable], Iterable[BlockStore]],
          layout: CacheLayout) -> tuple[list[int], list[float]]:
    """Each candidate's reachable leading blocks of ``hashes[:n]`` and their credit.

    Parameters
    ----------
    hashes : sequence
        The prompt's prefix-chained block ids.
    n : int
        How many leading blocks may be served from cache (the cacheable ones).
    locations : callable
        ``locations(block)``: the stores holding ``block`` (the live index's, or a stale view's).
    layout : CacheLayout

    Returns
    -------
    blocks : list of int
        Per candidate, the leading blocks it can load.
    credit : list of float
        Per candidate, the sum over those blocks of the credit of the tier each would come from,
        in blocks.
    """
    count = layout.size
    info, node_of, members = layout.info, layout.nodes, layout.members
    hbm_credit = layout.hbm_credit
    n = min(n, len(hashes))
    everyone = True     # every candidate reaches the prefix walked so far (the pool held it all)
    alive: dict[int, None] = {}   # otherwise, the candidates that do (an ordered set)
    cuts: list[int] = []          # depths where a block the pool lacked cut the candidates down
    survived: dict[int, int] = {}  # candidate -> the last cut it survived
    base = [0.0]                  # credit every live candidate had after each depth
    node_steps: dict[object, tuple[list[int], list[float]]] = {}  # node -> (depths, its extra credit)
    own: dict[int, float] = {}    # a candidate's extra credit from its own HBM
    depth = 0
    while depth < n:
        remote = None
        node_tier: dict[object, tuple[int, float]] = {}
        owners: list[int] = []
        for store in locations(hashes[depth]):
            entry = info.get(id(store))
            if entry is None:
                continue
            kind, key, rank, weight = entry
            if kind == _HBM:
                owners.extend(key)
            elif kind == _NODE:
                best = node_tier.get(key)
                if best is None or rank < best[0]:
                    node_tier[key] = (rank, weight)
            else:
                remote = weight
        if remote is None:
            # a cut: only the block's holders go on, listed from the holders, never by scanning
            # the candidates; the others stop at this depth (found at the end, from ``cuts``)
            alive = _cut(depth, owners + [k for node in node_tier for k in members[node]], everyone, alive,
                         cuts, survived)
            everyone = False
            if not alive:
                break
        step = remote if remote is not None else 0.0
        base.append(base[-1] + step)
        for node, (_, weight) in node_tier.items():
            depths, totals = node_steps.setdefault(node, ([0], [0.0]))
            depths.append(depth + 1)
            totals.append(totals[-1] + weight - step)
        for k in owners:
            if everyone or k in alive:
                tier = node_tier.get(node_of[k])
                own[k] = own.get(k, 0.0) + hbm_credit - (tier[1] if tier is not None else step)
        depth += 1
    blocks = [0] * count
    credit = [0.0] * count
    for k in range(count):
        # a candidate reaches the first cut after the last one it survived, or the walk's end
        nxt = survived.get(k, -1) + 1
        d = cuts[nxt] if nxt < len(cuts) else depth
        blocks[k] = d
        steps = node_steps.get(node_of[k])
        extra = steps[1][bisect_right(steps[0], d) - 1] if steps is not None else 0.0
        credit[k] = base[d] + extra + own.get(k, 0.0)
    return blocks, credit


def _added(total: float, step: float, times: int) -> float:
    """``total + step`` repeated ``times`` times, as a block-by-block sum rounds it."""
    if step == int(step) and abs(total) < 2**52 and abs(step) * times < 2**52:
        return total + step * times  # (whole numbers: every partial sum is exact)
    for _ in range(times):
        total += step
    return total


def reach_segments(segments: Sequence[tuple], n: int,
                   pieces: Callable[[Hashable, int, int], Iterable[tuple[int, int, tuple]]],
                   layout: CacheLayout) -> tuple[list[int], list[float]]:
    """:func:`reach` of a prompt given as segments ``(chain, start, end)``, for caches kept as
    extents (HBM stores only: no node tier, no pool), one step per stretch of blocks that the
    same stores hold (``pieces(chain, start, end)`` -> ``(s, e, stores)``, the extent index's
    or its delayed view's).

    Without a pool every block is a cut: a stretch of blocks at one location tuple is as many
    cuts with the same survivors, so it is one cut here (a candidate that survives its first
    block survives the stretch, and one that stops stops at its first block); the credit of
    the candidates' own HBM is summed per stretch as the per-block walk sums it."""
    if layout.node_stores or layout.remote:
        raise ValueError("reach_segments is for HBM stores only (no node tiers, no pool)")
    count = layout.size
    info, hbm_credit = layout.info, layout.hbm_credit
    everyone = True
    alive: dict[int, None] = {}
    cuts: list[int] = []
    survived: dict[int, int] = {}
    own: dict[int, float] = {}
    depth = 0
    done = False
    for chain, start, end in segments:
        if depth >= n or done:
            break
        end = min(end, start + n - depth)
        for s, e, where in pieces(chain, start, end):
            owners: list[int] = []
            for store in where:
                entry = info.get(id(store))
                if entry is not None and entry[0] == _HBM:
                    owners.extend(entry[1])
            alive = _cut(depth, owners, everyone, alive, cuts, survived)
            everyone = False
            if not alive:
                done = True
                break
            for k in owners:
                if k in alive:
                    own[k] = _added(own.get(k, 0.0), hbm_credit, e - s)
            depth += e - s
    blocks = [0] * count
    credit = [0.0] * count
    for k in range(count):
        nxt = survived.get(k, -1) + 1
        blocks[k] = cuts[nxt] if nxt < len(cuts) else depth
        credit[k] = 0.0 + 0.0 + own.get(k, 0.0)  # (base and node credit: none without tiers)
    return blocks, credit
