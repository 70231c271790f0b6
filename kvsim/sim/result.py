"""Results of a scenario run, as plain dictionaries, pandas DataFrames and Arrow tables."""

from __future__ import annotations

import hashlib
import numbers
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np

from kvsim._version import __version__
from kvsim.metrics.records import RequestRecords
from kvsim.metrics.replicas import replica_statistics
from kvsim.metrics.summary import LATENCY_KEYS

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from kvsim.scenario.load import Scenario
    from kvsim.sim.sizing import SystemSizing

__all__ = ["SystemRun", "RunResult", "SUMMARY_FORMAT"]

SUMMARY_FORMAT = 2
"""Version of the ``summary.json`` layout (docs/results.md). 2: always a list of points, each
with ``params`` and ``systems``; 1 (before it, unversioned): a dict per system without a sweep."""


@dataclass
class SystemRun:
    """One system simulated at one sweep point."""

    system: str
    point_index: int
    params: dict[str, Any]
    sizing: SystemSizing
    records: RequestRecords
    summary: dict[str, Any]
    in_system_mean: float
    iterations: int
    busy_s: float
    wall_s: float
    timeseries: list[dict[str, Any]] = field(default_factory=list)
    links: list[dict[str, Any]] = field(default_factory=list)
    storage: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    switches: list[dict[str, Any]] = field(default_factory=list)
    replica: int = 0
    seed: int | None = None  # the run's root seed (the point's, or its replica's)

    def describe(self) -> dict[str, Any]:
        """Hardware facts of the run, SI units: the system's totals and each pool's.

        A single-pool system also gives its pool's figures at the top level.
        """
        s = self.sizing
        pools = {
            p.name: {
                "role": p.role, "node": p.node.name, "nodes": p.spec.nodes, "accelerator": p.accelerator.name,
                "cards": p.cards, "instances": p.instances, "tp": p.tp,
                "weight_bytes_per_card": p.weight_bytes_per_card,
                "kv_capacity_bytes_per_card": p.kv_budget_bytes_per_card,
                "kv_capacity_tokens_per_instance": p.kv_tokens_per_instance,
                **({} if p.layout.plain_tp else {"layout": p.layout.label(), "pp": p.layout.pp, "ep": p.layout.ep,
                                                  "dp_attention": p.layout.dp_attention})
            }
            for p in s.pools
        }
        facts: dict[str, Any] = {"cards": s.cards, "instances": s.instances, "model": s.model.name,
                                 "dtype": s.dtype, "kv_dtype": s.kv_dtype}
        if len(s.pools) == 1:
            facts.update({k: v for k, v in next(iter(pools.values())).items() if k != "role"})
        facts["pools"] = pools
        return facts


def window_phrase(warmup_s: float, duration_s: float, auto: bool, starts_s: list[float],
                  ends_s: list[float] | None = None) -> str:
    """``[30 s, 300 s] of simulated time``; with ``warmup: auto`` the span of the warm-ups MSER-5
    found in the runs (``starts_s``): ``[27-57 s, 300 s] of simulated time, the warm-up found by
    MSER-5 in each run``. Runs whose windows end at different times (``ends_s``: a sweep over
    ``duration``, and with it ``warmup``) are listed window by window, the scenario's top-level
    values being nobody's."""
    windows = sorted(set(zip(starts_s, ends_s or [])), key=lambda w: (w[1], w[0]))
    if len({end for _, end in windows}) > 1 or (windows and not auto and windows != [(warmup_s, duration_s)]):
        listed = ", ".join(f"[{a:.3g} s, {b:g} s]" for a, b in windows[:6]) + (", ..." if len(windows) > 6 else "")
        found = "; the warm-up found by MSER-5 in each run" if auto else ""
        return f"{listed} of simulated time (one window per sweep point{found})"
    if not auto:
        return f"[{warmup_s:g} s, {duration_s:g} s] of simulated time"
    starts = sorted(set(starts_s)) or [warmup_s]
    found = f"{starts[0]:.3g} s" if len(starts) == 1 else f"{starts[0]:.3g}-{starts[-1]:.3g} s"
    return f"[{found}, {duration_s:g} s] of simulated time, the warm-up found by MSER-5 in each run"


@dataclass
class RunResult:
    """All runs of a scenario: every system at every sweep point.

    ``runs`` holds replica 0 of every (point, system), the run a scenario without
    ``replications`` makes; tables and studies read those. ``replicas`` holds the further
    replications (``replications: N`` > 1), in (point, replica, system) order; the summaries
    give statistics across all of them. ``stored`` maps a point index to the folders
    (``points/<hash>``, relative to the results folder) its runs were kept in, when a sweep
    executor (:mod:`kvsim.plan`) ran it.
    """

    scenario: Scenario
    seed: int
    runs: list[SystemRun] = field(default_factory=list)
    replicas: list[SystemRun] = field(default_factory=list)
    stored: dict[int, list[str]] = field(default_factory=dict)

    @classmethod
    def from_runs(cls, scenario: Scenario, seed: int, runs: list[SystemRun],
                  stored: dict[int, list[str]] | None = None) -> RunResult:
        """Split ``runs`` (any replicas) into :attr:`runs` and :attr:`replicas`."""
        return cls(scenario, seed, [r for r in runs if r.replica == 0], [r for r in runs if r.replica != 0],
                   dict(stored or {}))

    @property
    def swept(self) -> bool:
        return bool(self.scenario.spec.sweep)

    @property
    def baseline(self) -> str:
        return self.scenario.spec.baseline

    def run(self, system: str, point_index: int = 0) -> SystemRun:
        for run in self.runs:
            if run.system == system and run.point_index == point_index:
                return run
        raise KeyError(f"no run of system {system!r} at point {point_index}")

    def all_runs(self) -> list[SystemRun]:
        """Every run, replicas included, in (point, replica, system) order."""
        return sorted(self.runs + self.replicas, key=lambda r: (r.point_index, r.replica))

    def window_phrase(self) -> str:
        """The measurement window in words, for tables and reports (see :func:`window_phrase`)."""
        spec = self.scenario.spec
        runs = self.all_runs()
        return window_phrase(spec.warmup, spec.duration, spec.warmup_auto,
                             [r.summary.get("window", {}).get("start_s", spec.warmup) for r in runs],
                             [r.summary.get("window", {}).get("end_s", spec.duration) for r in runs])

    def runs_of(self, system: str, point_index: int) -> list[SystemRun]:
        """Every replica of ``system`` at ``point_index``, replica 0 first."""
        return [r for r in self.all_runs() if r.system == system and r.point_index == point_index]

    def points(self) -> list[int]:
        return sorted({r.point_index for r in self.runs})

    def summary_dict(self) -> dict[str, Any]:
        """The ``summary.json`` structure (format :data:`SUMMARY_FORMAT`; docs/results.md).

        The same shape with or without a sweep: ``points`` is a list (one entry without a
        sweep), each with ``index``, ``params`` (swept field -> value as written; empty without
        a sweep), ``seed`` and ``systems`` -> name -> metrics of replica 0, ``hardware``, and
        ``replicas``: ``n``, ``seeds`` and, per headline metric, the mean and 95 % Student-t
        interval across replicas (:mod:`kvsim.metrics.replicas`; bounds are None for one).
        """
        points = []
        for index in self.points():
            primary = [r for r in self.runs if r.point_index == index]
            systems: dict[str, Any] = {}
            for run in primary:
                reps = self.runs_of(run.system, index)
                systems[run.system] = {
                    **run.summary, "hardware": run.describe(),
                    "replicas": {"n": len(reps), "seeds": [r.seed for r in reps],
                                 "metrics": replica_statistics([r.summary for r in reps])},
                }
            entry = {"index": index, "params": primary[0].params, "seed": primary[0].seed, "systems": systems}
            if index in self.stored:
                entry["stored"] = self.stored[index]
            points.append(entry)
        calibration = getattr(self.scenario, "calibration", None)
        return {
            "format": SUMMARY_FORMAT,
            "scenario": self.scenario.name,
            **({"calibration": calibration.record()} if calibration is not None else {}),
            "seed": self.seed,
            "kvsim_version": __version__,
            "duration_s": self.scenario.spec.duration,
            "warmup_s": self.scenario.spec.warmup,
            "warmup": "mser5" if self.scenario.spec.warmup_auto else "fixed",
            "baseline": self.baseline,
            "sweep": {k: list(v) for k, v in self.scenario.spec.sweep.items()},
            "replications": self.scenario.spec.replications,
            "system_names": list(self.scenario.spec.systems),
            "points": points,
        }

    def summary_frame(self, replicas: bool = False) -> pd.DataFrame:
        """One row per (point, system): swept parameters, then flat metrics (``ttft_s_p99`` ...).

        With ``replicas`` every replication has its row, told apart by a ``replica`` column.
        """
        import pandas as pd  # only where frames are made: a run itself needs no pandas

        rows: list[dict[str, Any]] = []
        swept: set[str] = set()
        for run in self.all_runs() if replicas else self.runs:
            swept.update(run.params)
            rows.append(_flat_row(run, replicas))
        frame = pd.DataFrame(rows)
        # statistics only: a swept field may end the same way (slo.ttft_p99: [2 s, 3 s]) and holds text
        return frame.astype({c: float for c in frame.columns
                             if c.endswith(("_mean", "_p50", "_p90", "_p99")) and c not in swept})

    def summary_long_frame(self) -> pd.DataFrame:
        """``summary.csv``: one row per point x system x replica x numeric metric (docs/results.md).

        Columns: ``point``, the swept parameters, ``system``, ``replica``, ``metric``, ``stat``
        (``value``) and ``value``. A point with more than one replica adds, per headline metric,
        rows with ``replica`` empty and ``stat`` ``mean``, ``ci_low``, ``ci_high``,
        ``half_width`` (95 % Student t) and ``n``.
        """
        import pandas as pd

        wide = self.summary_frame(replicas=True)
        params = list(dict.fromkeys(k for r in self.runs for k in r.params))
        ids = ["point", *params, "system", "replica"]
        rows = []
        for record in wide.to_dict("records"):
            key = [record[c] for c in ids]
            for metric, value in record.items():
                if metric in ids or not _numeric(value):
                    continue
                rows.append(key + [metric, "value", float(value)])
        for index in self.points():
            for run in (r for r in self.runs if r.point_index == index):
                reps = self.runs_of(run.system, index)
                if len(reps) < 2:
                    continue
                key = [index, *[run.params.get(p) for p in params], run.system, None]
                for metric, stats in replica_statistics([r.summary for r in reps]).items():
                    for stat in ("mean", "ci_low", "ci_high", "half_width", "n"):
                        figure = stats[stat]
                        if figure is not None:
                            rows.append(key + [metric, stat, float(figure)])
        frame = pd.DataFrame(rows, columns=[*ids, "metric", "stat", "value"])
        return frame.astype({"replica": "Int64"})

    def summary_value_rows(self) -> list[list[Any]] | None:
        """``summary.csv``'s rows made without pandas where every cell's type is fixed -- no swept
        parameter, no replications: ``[point, system, replica, metric, "value", value]``, the rows
        of :meth:`summary_long_frame` (``tests/test_result_tables.py``); None otherwise."""
        if self.replicas or any(run.params for run in self.runs):
            return None
        flat = [_flat_row(run, True) for run in self.all_runs()]
        # the wide frame's columns: every run's keys, in the order first seen; a run without one
        # has nothing to give there (the frame's NaN)
        metrics = [key for key in dict.fromkeys(key for row in flat for key in row)
                   if key not in ("point", "system", "replica")]
        rows = []
        for row in flat:
            for metric in metrics:
                value = row.get(metric)
                if _numeric(value):
                    rows.append([row["point"], row["system"], row["replica"], metric, "value", float(value)])
        return rows

    def requests_table(self) -> pa.Table:
        """:meth:`requests_frame` as an Arrow table made without pandas: the columns, types and
        nulls ``pa.Table.from_pandas(requests_frame(), preserve_index=False)`` gives (a NaN is a
        null, text a ``large_string``), without pandas' schema metadata (``requests.parquet``)."""
        import pyarrow as pa

        from kvsim.arrow_numpy import constant_strings, from_numpy

        runs = self.all_runs()
        # columns some runs lack (a system with node failures has two more): where one does, the
        # others' are NaN and theirs float, as pandas' concat makes them, in its column order
        extras = {name for run in runs for name in run.records.extra_fields}
        partial = {name for name in extras if any(name not in run.records.extra_fields for run in runs)}
        order: dict[str, None] = {}
        per_run = []
        with_replica = bool(self.replicas)
        for run in runs:
            n = run.records.n
            columns = {"system": constant_strings(run.system, n),
                       "point": from_numpy(np.full(n, run.point_index, dtype=np.int64))}
            if with_replica:
                columns["replica"] = from_numpy(np.full(n, run.replica, dtype=np.int64))
            for key, value in run.params.items():
                columns[key] = constant_strings(str(value), n)
            for name, values in run.records.columns().items():
                columns[name] = from_numpy(values.astype(np.float64) if name in partial else values)
            order.update(dict.fromkeys(columns))
            per_run.append((n, columns))
        tables = []
        for n, columns in per_run:
            arrays = [columns[name] if name in columns else from_numpy(np.full(n, np.nan)) for name in order]
            tables.append(pa.Table.from_arrays(arrays, names=list(order)))
        return pa.concat_tables(tables)

    def _per_run_frame(self, attribute: str) -> pd.DataFrame:
        import pandas as pd

        frames = []
        for run in self.runs:
            rows = getattr(run, attribute)
            if rows:
                frame = pd.DataFrame(rows)
                frame.insert(0, "system", run.system)
                frame.insert(1, "point", run.point_index)
                frames.append(frame)
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def timeseries_frame(self) -> pd.DataFrame:
        """Sampled tier occupancy over time (physical and logical bytes per tier), per run."""
        return self._per_run_frame("timeseries")

    def links_frame(self) -> pd.DataFrame:
        """Every network link that carried bytes: capacity (B/s), bytes, mean utilisation, per run."""
        return self._per_run_frame("links")

    def storage_frame(self) -> pd.DataFrame:
        """Every storage resource used, per run: ``resource``, ``kind`` and its own units.

        IOPS ceilings (``kind`` ``read_iops`` / ``write_iops``) fill ``capacity_iops`` (I/Os per
        second) and ``ios`` (I/Os); staging CPUs (``cpu_staging``) fill ``capacity_cpu_s_per_s``
        (CPU-seconds per second) and ``cpu_s`` (CPU-seconds); a connector's pinned staging buffer
        (``pinned_buffer``) fills ``capacity_bytes`` and ``byte_s`` (byte-seconds of room held);
        the other kinds' columns are NaN.
        ``utilization_mean`` is the fraction of capacity used over the window.
        """
        return self._per_run_frame("storage")

    def records_digest(self, fields: tuple[str, ...] | None = None) -> str:
        """SHA-256 over every run's request records, bit for bit (runs in order, fields by name).

        Two runs with the same digest produced identical records: the check that a refactor kept
        results. ``fields`` restricts it to some columns (default: all of them, with a run's
        :attr:`~kvsim.metrics.records.RequestRecords.extra_fields` where it has them).
        """
        digest = hashlib.sha256()
        for run in self.runs:
            digest.update(f"{run.system}|{run.point_index}|{run.records.n}".encode())
            for name in fields if fields is not None else run.records.all_fields:
                digest.update(name.encode())
                digest.update(run.records.column(name).tobytes())
        return digest.hexdigest()

    def decisions_frame(self) -> pd.DataFrame:
        """Every P:D controller decision of a disaggregated run: time, signals, counts, moves."""
        return self._per_run_frame("decisions")

    def switches_frame(self) -> pd.DataFrame:
        """Every role switch: instance, roles, when decided, drained and back in service."""
        return self._per_run_frame("switches")

    def requests_frame(self) -> pd.DataFrame:
        """Every request of every run, with ``system``, ``point`` and swept parameters as columns
        (and ``replica`` after ``point`` when the scenario has replications)."""
        import pandas as pd

        frames = []
        with_replica = bool(self.replicas)
        for run in self.all_runs():
            frame = run.records.to_frame()
            frame.insert(0, "system", run.system)
            frame.insert(1, "point", run.point_index)
            if with_replica:
                frame.insert(2, "replica", run.replica)
            for col, (key, value) in enumerate(run.params.items()):
                frame.insert(2 + with_replica + col, key, str(value))
            frames.append(frame)
        return pd.concat(frames, ignore_index=True)


def _flat_row(run: SystemRun, replicas: bool) -> dict[str, Any]:
    """One run's row of :meth:`RunResult.summary_frame`: ids, swept parameters, flat metrics."""
    row: dict[str, Any] = {"point": run.point_index, "system": run.system}
    if replicas:
        row["replica"] = run.replica
    row.update(run.params)
    for key, value in run.summary.items():
        if key == "cache":
            row.update(_flat_cache(value))
        elif key in LATENCY_KEYS:
            for stat, number in value.items():
                row[f"{key}_{stat}"] = number
        elif key == "slo_met":
            for name, ok in value.items():
                row[f"slo_met_{name}"] = ok
        else:
            row[key] = value
    row["cards"] = run.sizing.cards
    return row


def _numeric(value: object) -> TypeGuard[numbers.Real | np.bool_]:
    """A number (or bool) that is not NaN: a metric summary.csv holds (names stay in summary.json)."""
    return isinstance(value, (numbers.Real, np.bool_)) and value == value


def _flat_cache(cache: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for tier, rate in cache["hit_rate"].items():
        row[f"hit_rate_{tier}"] = rate
    for key in ("computed_tokens", "flops_avoided", "remote_read_Bps", "remote_write_Bps"):
        row[key] = cache[key]
    row["bytes_loaded"] = sum(cache["bytes_loaded"].values())
    row["bytes_written"] = sum(cache["bytes_written"].values())
    row["writes_skipped"] = sum(cache["writes_skipped"].values())
    row["write_bytes_skipped"] = sum(cache["write_bytes_skipped"].values())
    domains = cache.get("domains")
    if domains is not None:
        row["hbm_physical_bytes_mean"] = domains["physical_bytes_mean"]
        row["hbm_logical_bytes_mean"] = domains["logical_bytes_mean"]
        row["dedup_ratio"] = domains["dedup_ratio"]
        row["cross_domain_bytes"] = domains["cross_domain_bytes"]
        row["scale_up_utilization_mean"] = domains["scale_up"]["utilization_mean"]
    top = cache["busiest_links"][0] if cache["busiest_links"] else None
    row["busiest_link"] = top["link"] if top else None
    row["busiest_link_utilization"] = top["utilization_mean"] if top else 0.0
    storage = cache.get("busiest_storage") or []
    row["busiest_storage"] = f"{storage[0]['kind']} {storage[0]['resource']}" if storage else None
    row["busiest_storage_utilization"] = storage[0]["utilization_mean"] if storage else 0.0
    return row
