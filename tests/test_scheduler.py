"""The batching scheduler on its own: chunked prefill, admission, preemption, conservation."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.kv.block_pool import BlockPool
from kvsim.serving.scheduler import BatchScheduler, SchedulerEvents, Sequence


class Log(SchedulerEvents):
    def __init__(self):
        self.emitted = 0
        self.first_token_at: dict[int, float] = {}
        self.finished_at: dict[int, float] = {}
        self.preemptions = 0
        self.admission_order: list[int] = []

    def admitted(self, seq, now):
        self.admission_order.append(seq.rid)

    def first_token(self, seq, now):
        assert seq.rid not in self.first_token_at
        self.first_token_at[seq.rid] = now

    def tokens_emitted(self, count, now):
        self.emitted += count

    def preempted(self, seq):
        self.preemptions += 1

    def finished(self, seq, now):
        assert seq.rid not in self.finished_at
        self.finished_at[seq.rid] = now


def _drain(scheduler: BatchScheduler, log: Log, max_iterations: int = 100_000):
    """Run schedule/complete until idle; returns the batches."""
    batches = []
    for step in range(max_iterations):
        batch = scheduler.schedule(float(step))
        if batch is None:
            return batches
        batches.append(batch)
        scheduler.complete(batch, float(step) + 0.5)
    raise AssertionError("scheduler did not drain")


def test_long_prompt_is_prefilled_in_budget_sized_chunks_then_decoded():
    log = Log()
    scheduler = BatchScheduler(BlockPool(10_000, 16), max_batched_tokens=4096, max_num_seqs=8, events=log)
    scheduler.add(Sequence(0, prompt_tokens=10_000, output_tokens=3))
    batches = _drain(scheduler, log)
    chunks = [b.prefills[0][1] for b in batches if b.prefills]
    assert chunks == [4096, 4096, 1808]
    # the third chunk completes the prompt and emits token 1; two decodes emit tokens 2 and 3
    assert len(batches) == 5 and all(len(b.decodes) == 1 for b in batches[3:])
    assert log.first_token_at[0] == 2.5 and log.finished_at[0] == 4.5 and log.emitted == 3
    # the chunk after 4096 cached tokens attends to them: pairs = c*p + c(c+1)/2
    assert batches[1].shape.prefill_pairs == 4096 * 4096 + 4096 * 4097 / 2
    assert batches[1].shape.prefill_context_tokens == 4096


def test_admission_waits_for_free_kv_blocks():
    log = Log()
    pool = BlockPool(num_blocks=10, block_size_tokens=16)  # 160 tokens
    scheduler = BatchScheduler(pool, max_batched_tokens=1000, max_num_seqs=8, events=log)
    scheduler.add(Sequence(0, prompt_tokens=100, output_tokens=40))  # needs 7 blocks at its end
    scheduler.add(Sequence(1, prompt_tokens=100, output_tokens=1))
    first = scheduler.schedule(0.0)
    # request 1 needs 7 blocks but only 3 are free after request 0's 7: it waits
    assert [s.rid for s, _ in first.prefills] == [0] and log.admission_order == [0]
    scheduler.complete(first, 1.0)
    _drain(scheduler, log)
    assert log.finished_at[0] < log.finished_at[1]
    assert pool.free_blocks == pool.num_blocks


def test_full_pool_preempts_the_newest_sequence_which_recomputes_and_still_emits_all_tokens():
    log = Log()
    pool = BlockPool(num_blocks=8, block_size_tokens=4)  # 32 tokens
    scheduler = BatchScheduler(pool, max_batched_tokens=64, max_num_seqs=8, events=log)
    a, b = Sequence(0, 8, 16), Sequence(1, 8, 16)  # each grows to 24 tokens: both cannot fit
    scheduler.add(a)
    scheduler.add(b)
    _drain(scheduler, log)
    assert log.preemptions >= 1 and b.preemptions >= 1 and a.preemptions == 0
    assert log.emitted == 32 and set(log.finished_at) == {0, 1}
    assert pool.free_blocks == pool.num_blocks


requests = st.lists(
    st.tuples(st.integers(1, 300), st.integers(1, 60)), min_size=1, max_size=25)


@settings(max_examples=150, deadline=None)
@given(
    reqs=requests,
    block_size=st.sampled_from([1, 4, 16]),
    spare_blocks=st.integers(0, 40),
    budget=st.integers(1, 512),
    max_seqs=st.integers(1, 16),
    ranks=st.sampled_from([1, 2, 4]),
)
def test_conservation_of_blocks_and_tokens(reqs, block_size, spare_blocks, budget, max_seqs, ranks):
    # ``budget`` and ``max_seqs`` per data-parallel attention rank, as an instance of ``ranks``
    # ranks is built (kvsim.sim.build): the instance's limits are the ranks' added up, and one
    # sequence's chunk is one rank's budget
    longest = max(p + o for p, o in reqs)
    pool = BlockPool(-(-longest // block_size) + spare_blocks, block_size)
    log = Log()
    scheduler = BatchScheduler(pool, max_batched_tokens=ranks * budget, max_num_seqs=ranks * max_seqs, events=log,
                               max_chunk_tokens=budget)
    seqs = [Sequence(i, p, o) for i, (p, o) in enumerate(reqs)]
    for seq in seqs:
        scheduler.add(seq)
    for step in range(200_000):
        batch = scheduler.schedule(float(step))
        if batch is None:
            break
        # blocks held by sequences plus free blocks is the pool: none lost, none invented
        assert sum(s.kv_blocks for s in seqs) + pool.free_blocks == pool.num_blocks
        assert 0 <= pool.free_blocks <= pool.num_blocks
        # every sequence holds enough blocks for its KV after this iteration
        for s, chunk in batch.prefills:
            assert s.kv_blocks * block_size >= s.kv_tokens + chunk
            assert 0 < chunk <= budget
        assert batch.shape.tokens <= ranks * budget
        assert len(scheduler.running) <= ranks * max_seqs
        # the router's view of queued prompt work is kept without scanning the queue, and exact
        assert scheduler.waiting_prompt_tokens == sum(s.prefill_target - s.kv_tokens for s in scheduler.waiting)
        scheduler.complete(batch, step + 0.5)
    else:
        raise AssertionError("did not drain")
    # every request finished exactly once, emitted exactly its output tokens, released its blocks
    assert sorted(log.finished_at) == list(range(len(reqs)))
    assert log.emitted == sum(o for _, o in reqs)
    assert all(s.generated == s.output_tokens and s.kv_blocks == 0 for s in seqs)
    assert pool.free_blocks == pool.num_blocks
    assert scheduler.waiting_prompt_tokens == 0 and scheduler.pending_prompt_tokens == 0
    assert all(log.first_token_at[i] <= log.finished_at[i] for i in log.finished_at)
