"""Packaging (issue 29 item 7): the sdist and the wheel build, carry what the package needs at run
time, and a wheel installed away from the source tree runs a scenario -- so ``pip install kvsim``
from an index would work.

The build runs without an isolated environment (the test extra brings setuptools, wheel and
build) and without compiling the kernels (``KVSIM_NO_COMPILE``): the wheel is then the pure-Python
one, which is what an install without a C compiler gets."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import kvsim

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    env = {**os.environ, "KVSIM_NO_COMPILE": "1"}
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel", "--outdir", str(out),
                           str(ROOT)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    wheel = next(out.glob("kvsim-*.whl"))
    sdist = next(out.glob("kvsim-*.tar.gz"))
    return wheel, sdist


def _package_data() -> set[str]:
    """The files under kvsim/ besides Python sources that the package reads at run time."""
    return {p.relative_to(ROOT).as_posix() for pattern in ("*.yaml", "*.pxd") for p in (ROOT / "kvsim").rglob(pattern)}


def test_the_wheel_carries_the_catalogs_the_kernel_declarations_and_the_command(built):
    wheel, _ = built
    assert wheel.name == f"kvsim-{kvsim.__version__}-py3-none-any.whl"  # no compiled code: any platform
    names = set(zipfile.ZipFile(wheel).namelist())
    data = _package_data()
    assert {"kvsim/hardware/data/accelerators.yaml", "kvsim/models/data/models.yaml"} <= data
    assert data <= names, sorted(data - names)
    sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "kvsim").rglob("*.py")}
    assert sources <= names, sorted(sources - names)
    assert not [n for n in names if n.endswith((".so", ".c", ".pyd"))]  # nothing built here ships
    meta = f"kvsim-{kvsim.__version__}.dist-info"
    assert f"{meta}/licenses/LICENSE" in names
    with zipfile.ZipFile(wheel) as z:
        entry = z.read(f"{meta}/entry_points.txt").decode()
        metadata = z.read(f"{meta}/METADATA").decode()
    assert "kvsim = kvsim.cli:main" in entry
    assert f"Version: {kvsim.__version__}" in metadata and "License-Expression: Apache-2.0" in metadata
    for dependency in ("simpy", "numpy", "pydantic", "pyarrow"):
        assert f"Requires-Dist: {dependency}" in metadata


def test_the_sdist_can_build_the_compiled_backend(built):
    _, sdist = built
    top = f"kvsim-{kvsim.__version__}/"
    names = {n.removeprefix(top) for n in tarfile.open(sdist).getnames()}
    assert {"setup.py", "pyproject.toml", "README.md", "LICENSE", "kvsim/backend_kernels.py"} <= names
    from kvsim.backend_kernels import KERNELS

    for module in KERNELS:  # every kernel's source, and its field types where it has them
        path = Path(*module.split(".")).with_suffix(".py")
        assert path.as_posix() in names
        if (ROOT / path.with_suffix(".pxd")).exists():
            assert path.with_suffix(".pxd").as_posix() in names
    assert _package_data() <= names


SCENARIO = """
name: from-the-wheel
seed: 1
duration: 20 s
warmup: 2 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 2/s}
  input_tokens: {kind: fixed, value: 512}
  output_tokens: {kind: fixed, value: 32}
systems:
  h20: {node: h20-8x, instances: 1}
"""


def test_an_installed_wheel_runs_a_scenario_away_from_the_source_tree(built, tmp_path):
    wheel, _ = built
    target = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", "--target",
                           str(target), str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (tmp_path / "s.yaml").write_text(SCENARIO)
    env = {**os.environ, "PYTHONPATH": str(target)}
    env.pop("KVSIM_BACKEND", None)
    probe = ("import kvsim, kvsim.backend as b; print(kvsim.__file__); print(b.resolve('auto')); "
             "r = kvsim.run(kvsim.load_scenario('s.yaml')); print(len(r.runs[0].records.to_frame()))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    where, backend, requests = done.stdout.split()
    assert Path(where).is_relative_to(target)  # the installed copy, not the checkout
    assert backend == "python"  # the pure-Python wheel runs the reference engine
    assert int(requests) > 20
    # the command line it installs
    done = subprocess.run([str(target / "bin" / "kvsim"), "catalog", "--json"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0 and "h20-8x" in done.stdout, done.stderr[-2000:]
