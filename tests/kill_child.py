"""The target of the kill test's forked ``kvsim run`` (tests/test_kill.py): a module of its own so
the child imports nothing but kvsim's command line."""

from __future__ import annotations

import os


def kvsim_main(args: list[str], log: str) -> None:
    """``kvsim`` with ``args``, its output appended to ``log``; exits with its code."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    from kvsim.cli import main

    os._exit(main(args))
