"""``calib.yaml``: fitted parameter values with the data they came from, and applying them to a
scenario (``calibration: calib.yaml`` in a scenario file, relative to that file).

The file is written by ``kvsim calibrate``. Only ``accelerator`` and ``fitted.<name>.value`` steer
a scenario; the rest (bounds, datasheet defaults, data files with sha256 and row ids, residuals,
leave-one-out errors) is the evidence, kept beside the numbers it supports.

Efficiency values apply to the calibrated card only (its catalog entry). Engine values (``engine.*``)
describe the serving software and go into the scenario's ``engine:`` section, so they apply to
every system of the scenario, whatever its card; a system that runs another engine states its own
``engine:`` fields, which win.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kvsim.calibration.parameters import PARAMETERS, apply_to_raw, parameter
from kvsim.yaml_io import Located, SpecError, load_yaml, read_utf8

__all__ = ["Calibration", "FORMAT_VERSION", "read_calibration", "write_calibration", "apply_calibration_field",
           "apply_calibration_engine"]

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Calibration:
    """The part of a ``calib.yaml`` that steers a scenario, with the file's identity."""

    path: str
    sha256: str
    accelerator: str
    values: dict[str, float]

    def record(self) -> dict[str, Any]:
        """What a run's summary records about the calibration it used."""
        return {"path": self.path, "sha256": self.sha256, "accelerator": self.accelerator,
                "values": dict(self.values)}


def write_calibration(path: str | Path, document: dict[str, Any]) -> Path:
    """Write a calibration document (see :func:`kvsim.calibration.report.calibration_document`)."""
    path = Path(path)
    header = ("# kvsim calibration: fitted values (fitted.*.value) with bounds, datasheet defaults, the data\n"
              "# they came from and their errors. Use it from a scenario with  calibration: " + path.name + "\n")
    path.write_text(header + yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=110),
                    encoding="utf-8")
    return path


def read_calibration(path: str | Path) -> Calibration:
    """Read the steering part of a ``calib.yaml``, checked as a fit's output is: the format
    version (a whole number, not ``true``), the accelerator's name, and each fitted value a known
    parameter's, a finite number (not a boolean or a string) within that parameter's physical
    bounds (:data:`~kvsim.calibration.parameters.PARAMETERS`, the same bounds the fit keeps to).

    Raises
    ------
    SpecError
        ``file:line: field: message`` for each problem.
    """
    path = Path(path)
    data, text = read_utf8(path, "calibration file")  # a regular UTF-8 file of sane size
    located = load_yaml(text, str(path))
    doc = located.data
    if not isinstance(doc, dict):
        raise SpecError([f"{path}:1: a calibration file is a mapping (kvsim_calibration, accelerator, fitted, ...)"])
    problems = []
    version = doc.get("kvsim_calibration")
    if isinstance(version, bool) or not isinstance(version, int) or version != FORMAT_VERSION:
        problems.append(located.problem(("kvsim_calibration",), f"expected format version {FORMAT_VERSION}, "
                                        f"got {doc.get('kvsim_calibration')!r}"))
    accelerator = doc.get("accelerator")
    if not isinstance(accelerator, str) or not accelerator:
        problems.append(located.problem(("accelerator",), "required: the catalog accelerator the values were fitted for"))
    fitted = doc.get("fitted")
    values: dict[str, float] = {}
    if not isinstance(fitted, dict) or not fitted:
        problems.append(located.problem(("fitted",), "required: a mapping of parameter name -> {value: ...}"))
        fitted = {}
    for name, entry in fitted.items():
        where = ("fitted", name)
        if name not in PARAMETERS:
            problems.append(located.problem(where, f"unknown parameter; known: {', '.join(PARAMETERS)}"))
            continue
        if not isinstance(entry, dict) or "value" not in entry:
            problems.append(located.problem(where, f"expected a mapping with the fitted value ({{value: ...}}), "
                                                   f"got {str(entry)[:60]!r}"))
            continue
        value = entry["value"]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            problems.append(located.problem(where + ("value",), f"expected a number, got {str(value)[:60]!r}"))
            continue
        p = PARAMETERS[name]
        if not math.isfinite(value):
            problems.append(located.problem(where + ("value",), f"expected a finite number, got {value!r}"))
            continue
        if not p.lower <= value <= p.upper:
            problems.append(located.problem(where + ("value",), f"{value:g} is outside the physical range "
                                            f"[{p.lower:g}, {p.upper:g}]"))
            continue
        values[name] = float(value)
    if problems:
        raise SpecError(problems)
    return Calibration(str(path.resolve()), hashlib.sha256(data).hexdigest(), accelerator, values)


def apply_calibration_field(raw: dict[str, Any], located: Located, base_dir: Path | None
                            ) -> tuple[dict[str, Any], Calibration | None]:
    """Apply a scenario's ``calibration:`` file to its data; returns the new data and the calibration.

    The path is resolved against the scenario's folder and written back absolute, so the
    resolved scenario can be re-run from elsewhere. The scenario's own catalog entry for the card
    wins over the calibration, field by field. Only the card's efficiencies are applied here: the
    engine values go to the systems on that card (:func:`apply_calibration_engine`), which takes
    the catalogs to know.
    """
    name = raw.get("calibration")
    if name is None:
        return raw, None
    if not isinstance(name, str) or not name.strip():
        raise SpecError([located.problem(("calibration",), "expected the path of a calib.yaml (kvsim calibrate)")])
    file = Path(name)
    if not file.is_absolute() and base_dir is not None:
        file = base_dir / file
    try:
        calibration = read_calibration(file)
    except SpecError as exc:
        raise SpecError([located.problem(("calibration",), p) for p in exc.problems]) from None
    card_only = {n: v for n, v in calibration.values.items() if parameter(n).target == "accelerator"}
    out = apply_to_raw(raw, calibration.accelerator, card_only)
    out["calibration"] = calibration.path
    return out, calibration


def apply_calibration_engine(raw: dict[str, Any], calibration: Calibration, systems: list[str]) -> dict[str, Any]:
    """``raw`` with the calibration's engine values given to ``systems`` (those running on its card);
    a system's own ``engine:`` fields and the scenario's win over them."""
    engine_only = {n: v for n, v in calibration.values.items() if parameter(n).target == "engine"}
    return apply_to_raw(raw, calibration.accelerator, engine_only, systems) if engine_only and systems else raw
