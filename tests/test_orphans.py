"""``kvsim run --workers N`` as a process tree (issue 22, items 7 and 9): killing the ``kvsim``
process leaves no process behind; killing its forkserver or workers loses no point; a reader of
its output that goes away does not stop it writing its results.

Each test starts ``python -m kvsim.cli`` with a marker of its own in the environment, which every
process it starts inherits (workers, forkserver, resource tracker), and finds them all by it in
``/proc``; whatever the outcome, a test kills what is left of its tree before it ends.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists()
                                or "forkserver" not in multiprocessing.get_all_start_methods(),
                                reason="finds processes in /proc; kills the forkserver")

MARK = "KVSIM_TEST_TREE"

LONG = """\
name: orphans
seed: 5
duration: 20000 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 4/s}
  input_tokens: {kind: lognormal, median: 200, sigma: 0.5, max: 800}
  output_tokens: {kind: lognormal, median: 40, sigma: 0.5, max: 160}
systems:
  h20: {node: h20-8x, instances: 1}
sweep:
  workload.arrival.rate: [4/s, 5/s, 6/s, 7/s]
"""
"""Points of tens of wall seconds each: still running when the test kills the ``kvsim`` process."""

SHORT = LONG.replace("duration: 20000 s", "duration: 400 s").replace(", 7/s]", "]")
"""Three points of under a wall second each."""

TINY = SHORT.replace("duration: 400 s", "duration: 20 s")

SECONDS = SHORT.replace("duration: 400 s", "duration: 6000 s")
"""Three points of a wall second or more each (SHORT's finish in under 0.1 s on the compiled
engine: all three can be done before a kill after the first lands)."""

GONE_WITHIN_S = 15.0
"""Wall seconds the processes of a killed ``kvsim`` get to exit (they exit in well under one)."""


class Tree:
    """``kvsim ARGS`` started in ``folder`` and every process it starts, found by an environment
    marker; lines of its standard error collected by a thread."""

    def __init__(self, folder: Path, args: list[str], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE):
        self.mark = uuid.uuid4().hex
        env = {**os.environ, MARK: self.mark, "TMPDIR": str(folder)}  # error reports land in the test folder
        self.process = subprocess.Popen([sys.executable, "-m", "kvsim.cli", *args], cwd=folder, env=env,
                                        stdout=stdout, stderr=stderr, text=True)
        self.lines: queue.Queue = queue.Queue()
        self.text: list[str] = []
        self.eof = threading.Event()
        if self.process.stderr is not None:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stderr:
            self.text.append(line)
            self.lines.put(line)
        self.eof.set()

    def wait_for_line(self, part: str, timeout_s: float = 120.0) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line with {part!r} in {timeout_s:g} s:\n{''.join(self.text)}") from None
            if part in line:
                return line

    def pids(self) -> list[int]:
        """Every live process carrying this tree's marker (zombies left out)."""
        found = []
        entry = f"{MARK}={self.mark}".encode()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as handle:
                    marked = entry in handle.read().split(b"\0")
                if marked and _state(int(name)) != "Z":
                    found.append(int(name))
            except OSError:  # gone meanwhile, or not ours
                continue
        return found

    def children(self, pid: int) -> list[int]:
        return [p for p in self.pids() if _parent(p) == pid]

    def forkserver(self) -> int | None:
        servers = [p for p in self.children(self.process.pid) if b"forkserver" in _cmdline(p)]
        return servers[0] if servers else None

    def wait_for(self, condition, timeout_s: float, what: str):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"{what} within {timeout_s:g} s")

    def kill_all(self) -> None:
        """SIGKILL every process of the tree (cleanup, whatever happened)."""
        if self.process.poll() is None:
            self.process.kill()
        for _ in range(3):
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if not self.pids():
                break
            time.sleep(0.1)
        self.process.wait(timeout=30)


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
        return handle.read().rsplit(")", 1)[1].split()


def _state(pid: int) -> str:
    return _stat(pid)[0]


def _parent(pid: int) -> int:
    try:
        return int(_stat(pid)[1])
    except OSError:
        return -1


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def _scenario(folder: Path, text: str) -> Path:
    path = folder / "s.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_sigkill_of_kvsim_run_leaves_no_process_and_closes_stderr(tmp_path):
    """SIGKILL of ``kvsim run --workers 2`` while both workers compute: within a bound, no process
    it started is left (workers, forkserver, resource tracker) and its standard error reaches the
    end of file (a CI job reading it would otherwise wait for the workers)."""
    _scenario(tmp_path, LONG)
    tree = Tree(tmp_path, ["run", "s.yaml", "--out", "out", "--workers", "2", "--no-progress", "--no-report"])
    try:
        tree.wait_for_line("point run(s) to do")
        server = tree.wait_for(tree.forkserver, 120, "a forkserver")
        tree.wait_for(lambda: len(tree.children(server)) >= 2, 120, "two workers")
        assert tree.pids(), "the tree is found by its marker"
        os.kill(tree.process.pid, signal.SIGKILL)
        tree.process.wait(timeout=30)
        deadline = time.monotonic() + GONE_WITHIN_S
        while tree.pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        left = {pid: _cmdline(pid).replace(b"\0", b" ")[:120] for pid in tree.pids()}
        assert not left, f"processes left {GONE_WITHIN_S:g} s after kvsim was killed: {left}"
        assert tree.eof.wait(max(0.0, deadline - time.monotonic()) + 1.0), "standard error is still open"
    finally:
        tree.kill_all()


def test_killing_the_forkserver_and_workers_between_points_loses_no_point(tmp_path):
    """After the first point finishes, the forkserver and every worker are killed (as ``pkill -f``
    of the command line would: the workers carry the forkserver's). The run goes on on fresh
    workers, says so, exits 0 with every point in summary.json, and leaves nothing behind. (It
    once exited 0 with no summary and no word, or 3 on a refused connection to the dead
    forkserver, depending on when the kill landed.)"""
    _scenario(tmp_path, SECONDS)
    tree = Tree(tmp_path, ["run", "s.yaml", "--out", "out", "--workers", "2", "--no-progress", "--no-report"])
    try:
        tree.wait_for_line("] point ")  # a point finished
        server = tree.wait_for(tree.forkserver, 60, "a forkserver")
        for pid in [server, *tree.children(server)]:
            os.kill(pid, signal.SIGKILL)
        code = tree.process.wait(timeout=300)
        tree.eof.wait(30)
        err = "".join(tree.text)
        assert code == 0, err
        assert "on fresh worker processes" in err
        summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
        assert [p["index"] for p in summary["points"]] == [0, 1, 2], err
        assert all(p["systems"]["h20"]["requests_completed"] > 0 for p in summary["points"])
        tree.wait_for(lambda: not tree.pids(), GONE_WITHIN_S, "every process gone")
    finally:
        tree.kill_all()


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_run_whose_output_reader_left_still_writes_its_results(tmp_path, stream):
    """``kvsim run ... | head`` (stdout) or ``2>&1 | head`` (stderr): the reader has gone before kvsim
    writes; the run still writes its results and exits 0, with no 'Exception ignored' noise."""
    _scenario(tmp_path, TINY)
    read, write = os.pipe()
    os.close(read)  # the reader has gone
    other = tmp_path / "other.txt"
    try:
        with open(other, "w", encoding="utf-8") as sink:
            pipes = {"stdout": write, "stderr": sink} if stream == "stdout" else {"stdout": sink, "stderr": write}
            tree = Tree(tmp_path, ["run", "s.yaml", "--out", "out", "--workers", "1", "--no-report"], **pipes)
            try:
                code = tree.process.wait(timeout=300)
            finally:
                tree.kill_all()
    finally:
        os.close(write)
    text = other.read_text(encoding="utf-8")
    assert code == 0, text
    assert "Exception ignored" not in text and "Traceback" not in text, text
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    assert len(summary["points"]) == 3
    assert (tmp_path / "out" / "manifest.json").is_file()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_whose_forkserver_died_before_it_started_exits_at_once():
    """A worker whose forkserver is already dead when it ties itself to the main process (adopted
    by a reaper before it could ask the kernel for SIGKILL with its parent) exits instead of living
    on, unknown to its pool, holding the pool's pipes. Played by a grandchild of this process whose
    parent (the "forkserver") exits first."""
    from kvsim.plan import executor

    main = os.getpid()
    read, write = os.pipe()
    middle = os.fork()
    if middle == 0:  # the forkserver: starts the worker, then dies
        try:
            server = os.getpid()
            if os.fork() == 0:  # the worker
                os.close(read)
                deadline = time.monotonic() + 10
                while os.getppid() == server and time.monotonic() < deadline:
                    time.sleep(0.01)  # until its forkserver has died and it was adopted
                os.write(write, f"adopted by {os.getppid()};".encode())
                executor._tie_to(main)
                os.write(write, b" returned")
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(middle, 0)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read().decode()
    if said.startswith(f"adopted by {main};"):
        pytest.skip("this process is a subreaper: it adopts the worker, as the main process it is")
    assert said.startswith("adopted by ") and said.endswith(";"), f"the orphaned worker went on ({said})"
