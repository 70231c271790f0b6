"""YAML the safe loader cannot construct, or that would exhaust memory or the stack, is refused
in one line with the file (and line where there is one), exit 2, never a traceback or a hang."""

from __future__ import annotations

import os

import pytest

from kvsim.cli import main


def _bomb(levels: int = 9) -> str:
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, levels):
        prev, name = chr(96 + i), chr(97 + i)
        lines.append(f"{name}: &{name} [" + ",".join(f"*{prev}" for _ in range(9)) + "]")
    return "\n".join(lines) + "\n"  # 751 bytes that expand to 9^9 values


@pytest.mark.parametrize("text, words", [
    ("name: x\nduration: !!python/object:os.system 10\n", "is not plain YAML"),
    ("name: !custom x\n", "is not plain YAML"),
    ("name: x\nseed: !!int abc\n", "a value YAML cannot read"),
    ("? [a, b]\n: 1\n", "a key must be a plain name"),
    (_bomb(), "aliases (*name) are expanded"),
    ("a: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested more than 64 levels deep"),  # read without recursion
    ("a: " + "[" * 100 + "]" * 100 + "\n", "nested more than 64 levels deep"),
])
def test_hostile_yaml_is_refused_in_one_line(tmp_path, capsys, text, words):
    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert words in err and "hostile.yaml" in err and "Traceback" not in err
    assert len(err.splitlines()) == 2  # "invalid input" and the one problem


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_a_device_or_pipe_as_scenario_is_refused_unread(tmp_path, capsys, special):
    # reading /dev/zero never ends (it ran out of memory: exit 3), opening a FIFO waits forever
    path = special
    if special == "fifo":
        path = tmp_path / "s.yaml"
        os.mkfifo(path)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: is not a regular file" in err and "Traceback" not in err
