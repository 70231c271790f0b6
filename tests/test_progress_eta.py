"""Progress that tells the truth (issue 29 item 6): the ETA from the finished tasks' own pace shared
over the workers, the cost model's estimate before any finishes, and a heartbeat in a silent log."""

from __future__ import annotations

import io

import pytest

from kvsim.plan.progress import SweepProgress
from kvsim.plan.tasks import SweepTask


def _tasks(weights):
    return [SweepTask(i, 0, 1, f"k{i}", {"x": i}, w) for i, w in enumerate(weights)]


def test_the_first_eta_counts_the_work_left_over_the_workers():
    tasks = _tasks([1.0] * 8)
    progress = SweepProgress("s", tasks, stream=io.StringIO(), workers=4, heartbeat_s=0)
    # four tasks of 10 s each run at once; the first to finish says: 7 units left at 0.1 unit per
    # second per worker on 4 workers = 17.5 s (elapsed-based it was 70 s: 4x too high)
    progress.finished(tasks[0], 10.0)
    assert progress.eta_s() == pytest.approx(17.5)
    for task in tasks[1:4]:
        progress.finished(task, 10.0)
    assert progress.eta_s() == pytest.approx(10.0)  # four left, one round of 10 s
    for task in tasks[4:7]:
        progress.finished(task, 10.0)
    assert progress.eta_s() == pytest.approx(10.0)  # the last one runs alone: one worker's pace
    progress.finished(tasks[7], 10.0)
    assert progress.eta_s() == 0.0


def test_weights_make_a_heavy_task_count_for_its_cost():
    tasks = _tasks([1.0, 9.0])
    progress = SweepProgress("s", tasks, stream=io.StringIO(), workers=1, heartbeat_s=0)
    progress.finished(tasks[0], 2.0)  # 0.5 unit per second: 9 units take 18 s
    assert progress.eta_s() == pytest.approx(18.0)


def test_the_opening_line_gives_the_cost_models_estimate():
    stream = io.StringIO()
    progress = SweepProgress("s", _tasks([30.0, 30.0, 40.0]), stream=stream, workers=2, estimated_cpu_s=100.0,
                             heartbeat_s=0)
    progress.begin("on 2 local worker processes")
    assert "3 point run(s) to do, on 2 local worker processes; estimated 50 s (cost model)" in stream.getvalue()


def test_a_silent_log_gets_a_heartbeat():
    stream = io.StringIO()
    tasks = _tasks([1.0, 1.0])
    progress = SweepProgress("s", tasks, stream=stream, workers=2, estimated_cpu_s=100.0, heartbeat_s=30.0)
    start = progress.started
    assert not progress.beat(start + 10.0)  # a line was written less than 30 s ago (none yet: the start)
    assert progress.beat(start + 31.0)
    line = stream.getvalue().splitlines()[-1]
    assert line.startswith("kvsim: still running: 0/2 done, 2 in flight; elapsed 31 s, about 19 s left by the "
                           "cost model")
    assert not progress.beat(start + 40.0)  # the heartbeat itself was a line
    progress.finished(tasks[0], 50.0, now=start + 50.0)
    progress.last_line = start
    assert progress.beat(start + 60.0)  # the pace said 50 s when the task finished, 10 s ago
    assert stream.getvalue().splitlines()[-1].endswith("1/2 done, 1 in flight; elapsed 1 min 00 s, ETA 40 s")
    assert progress.beat(start + 90.0)  # the next heartbeat counts down: it never repeats the same ETA
    assert stream.getvalue().splitlines()[-1].endswith("ETA 10 s")
    assert progress.beat(start + 120.0)
    assert stream.getvalue().splitlines()[-1].endswith("past the ETA the finished points' pace gave")
    progress.finished(tasks[1], 50.0)
    progress.last_line = start
    assert not progress.beat(start + 200.0)  # all done: nothing runs
    progress.close()


def test_the_heartbeat_thread_stops_with_the_sweep():
    progress = SweepProgress("s", _tasks([1.0]), stream=io.StringIO(), heartbeat_s=30.0)
    progress.begin("in this process")
    assert progress._beat is not None and progress._beat.is_alive()
    progress.close()
    assert progress._beat is None
