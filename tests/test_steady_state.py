"""Statistics that do not mislead: token throughput past saturation, steady-state flags, MSER-5.

The thresholds are documented in kvsim.metrics.steady_state and docs/statistics.md.
"""

from __future__ import annotations

import numpy as np
import pytest

import kvsim
from kvsim.metrics.steady_state import in_system_integral, in_system_slope, mser, mser5_warmup_s, mser_statistic
from kvsim.report.table import FLAG_MARK, comparison_table

# ------------------------------------------------------------------------------------ MSER-5


def test_mser_statistic_matches_a_hand_computed_case():
    # Z = [10, 4, 0, 0, 0, 0, 0, 0], MSER(d) = sum_{j>d} (Z_j - mean)^2 / (m - d)^2:
    #   d=0: mean 14/8 = 1.75, SS = 8.25^2 + 2.25^2 + 6 * 1.75^2 = 91.5  -> 91.5 / 64
    #   d=1: mean 4/7, SS = (24/7)^2 + 6 * (4/7)^2 = 672/49             -> 672 / 49 / 49
    #   d>=2: all zeros                                                 -> 0
    z = np.array([10.0, 4, 0, 0, 0, 0, 0, 0])
    expected = [91.5 / 64, 672 / 49 / 49, 0, 0, 0, 0, 0, 0]
    assert mser_statistic(z) == pytest.approx(expected, abs=1e-12)
    # raw observations, five to a batch (batch means = z), plus a trailing partial batch that
    # MSER-5 drops (were it kept, the 1000s would move every statistic)
    raw = np.concatenate([np.array([8.0, 12, 10, 9, 11]), np.full(5, 4.0), np.array([1.0, -1, 0, 0, 0]),
                          np.zeros(25), [1000.0, 1000.0]])
    assert mser(raw) == 10  # d* = 2 batches (ties go to the smallest d) = 10 observations


def test_mser_searches_only_the_first_half():
    # Z = [1, 3, 1, 3]: d=0: mean 2, SS 4 -> 4/16 = 0.25; d=1: mean 7/3, SS 24/9 -> 24/81 = 0.296;
    # d=2: mean 2, SS 2 -> 2/4 = 0.5; d=3 (one value): 0 -- but d > m/2 is not a truncation
    # MSER may choose (the run would be too short to tell), so d* = 0.
    z = np.array([1.0, 3, 1, 3])
    assert mser_statistic(z) == pytest.approx([0.25, 24 / 81, 0.5, 0.0])
    assert mser(np.repeat(z, 5)) == 0


def test_in_system_integral_and_slope_are_exact():
    # two requests: [1, 3) and [2, inf); N = 0 on [0,1), 1 on [1,2), 2 on [2,3), 1 after
    arrival, end = np.array([1.0, 2.0]), np.array([3.0, np.inf])
    assert in_system_integral(arrival, end, np.array([0.0, 1.5, 2.5, 4.0])) == pytest.approx([0, 0.5, 2.0, 4.0])
    # one request staying from T/2 to the end of [0, T]: slope = [(T/2)^2 - 0] / 2 / (T^3/12) = 1.5 / T
    assert in_system_slope(np.array([5.0]), np.array([np.inf]), 0.0, 10.0) == pytest.approx(0.15)
    # N(t) on a fine grid, least squares by numpy: the same slope
    arrival = np.array([0.5, 1.0, 2.0, 6.0, 7.5])
    end = np.array([3.0, 8.0, np.inf, 9.0, np.inf])
    grid = np.linspace(0.0, 10.0, 200_001)
    level = ((arrival[None, :] <= grid[:, None]) & (grid[:, None] < end[None, :])).sum(axis=1)
    assert in_system_slope(arrival, end, 0.0, 10.0) == pytest.approx(np.polyfit(grid, level, 1)[0], rel=1e-3)


def test_mser5_finds_a_transient_and_not_a_stationary_level():
    # a queue that builds from empty for 20 s to a flat level of ~40 in a 100 s run: requests
    # arrive every 0.05 s and stay 2 s, except that the stays of the first 20 s ramp up from 0
    arrival = np.arange(0.0, 100.0, 0.05)
    stay = np.where(arrival < 20.0, 2.0 * arrival / 20.0, 2.0)
    warmup = mser5_warmup_s(arrival, arrival + stay, 100.0)
    assert 18.0 <= warmup <= 24.0  # the level is flat from 22 s (the last ramped request leaves)
    # the same level from the start (no transient but the first 2 s fill): nothing to cut
    assert mser5_warmup_s(arrival, arrival + 2.0, 100.0) <= 3.0


# ------------------------------------------------------------------------ flags on real runs

OPEN = """
name: flags
seed: 4
duration: {duration} s
warmup: {warmup} s
model: qwen3-8b
workload:
  arrival: {{kind: poisson, rate: {rate}/s}}
  input_tokens: {{kind: lognormal, median: 1000, sigma: 0.5, max: 4000}}
  output_tokens: {{kind: lognormal, median: 150, sigma: 0.5, max: 1000}}
systems:
  one: {{node: l20-8x, instances: 1}}
"""


def _summary(text: str) -> dict:
    return kvsim.run(kvsim.parse_scenario(text, "s.yaml")).runs[0].summary


def test_a_comfortable_steady_point_has_no_flags():
    # ~40 % of one L20 instance's ~2.5 requests/s; 110 s window, e2e p50 ~ 5 s
    summary = _summary(OPEN.format(duration=120, warmup=10, rate=1))
    assert summary["flags"] == []
    state = summary["steady_state"]
    assert state["completions_per_instance"] >= 20 and state["e2e_p50_window_share"] < 0.1
    assert abs(state["in_system_growth_share"]) < 0.05


def test_an_overloaded_point_is_flagged_unstable():
    # 12/s into one instance that serves ~2.5/s: the backlog grows by ~9.5 requests a second
    summary = _summary(OPEN.format(duration=40, warmup=5, rate=12))
    assert "unstable" in summary["flags"]
    state = summary["steady_state"]
    assert state["in_system_growth_share"] > 0.5
    # the trend's growth agrees with the window's count balance within a few requests per cent
    arrivals = summary["requests_arrived"]
    assert state["in_system_growth"] == pytest.approx(arrivals - summary["requests_completed"], rel=0.2)


def test_a_window_shorter_than_the_latency_is_flagged_too_short():
    # 1,000-token outputs on an L20 take ~30 s each; the window is 15 s
    text = OPEN.format(duration=20, warmup=5, rate=0.5).replace("median: 150, sigma: 0.5", "median: 1000, sigma: 0.1")
    summary = _summary(text)
    assert "too_short" in summary["flags"]
    assert summary["e2e_s"]["p50"] > 15.0


CLOSED = """
name: closed
seed: 4
duration: 210 s
warmup: 10 s
model: qwen3-8b
workload:
  arrival: {{kind: closed_loop, clients: {clients}}}
  input_tokens: {{kind: fixed, value: 1000}}
  output_tokens: {{kind: fixed, value: 150}}
systems:
  one: {{node: l20-8x, instances: 1}}
"""


def test_closed_loop_ttft_beyond_the_window_is_flagged_too_short_not_unstable():
    # the case: a closed-loop point whose TTFT (~400 s) exceeds its 200 s window
    summary = _summary(CLOSED.format(clients=1800))
    assert summary["ttft_s"]["p50"] > 200.0
    assert "too_short" in summary["flags"] and "unstable" not in summary["flags"]
    assert summary["steady_state"]["completions_per_client"] < 1
    # a few clients on the same system: a steady point
    assert _summary(CLOSED.format(clients=8))["flags"] == []


def test_token_throughput_does_not_fall_past_saturation():
    # one L20 instance serves ~2.5 requests/s of this workload; offer ~1.2x, 2.4x and 4.8x
    summaries = [_summary(OPEN.format(duration=40, warmup=5, rate=rate)) for rate in (3, 6, 12)]
    assert all("unstable" in s["flags"] for s in summaries)
    total = [s["total_tokens_per_s"] for s in summaries]
    for lighter, heavier in zip(total, total[1:]):
        assert heavier >= 0.99 * lighter
    for s in summaries:
        assert s["total_tokens_per_s"] == pytest.approx(s["input_tokens_per_s"] + s["output_tokens_per_s"])


def test_the_table_marks_flagged_numbers_and_explains_them():
    text = OPEN.format(duration=120, warmup=10, rate=6).replace(
        "  one: {node: l20-8x, instances: 1}", "  big: {node: l20-8x, instances: 8}\n  small: {node: l20-8x, instances: 1}")
    result = kvsim.run(kvsim.parse_scenario(text, "s.yaml"))
    assert result.run("big").summary["flags"] == [] and "unstable" in result.run("small").summary["flags"]
    table = comparison_table(result)
    rows = {line.split()[0]: line.split() for line in table.splitlines() if line.split()[:1] in (["big"], ["small"])}
    big, small = rows["big"][1], rows["small"][1]  # requests/s
    other = "big" if result.baseline == "small" else "small"
    ratio = rows[other][12]  # goodput / baseline's
    assert not big.endswith(FLAG_MARK) and small.endswith(FLAG_MARK) and ratio.endswith(FLAG_MARK)
    assert rows["big"][-1] == "ok" and "unstable" in " ".join(rows["small"][13:])
    assert f"{FLAG_MARK} not a steady-state number" in table and "unstable:" in table


def test_the_gap_study_marks_gaps_read_from_flagged_points():
    from kvsim.report.gap import gap_frame, gap_markdown
    from test_gap import SCENARIO as GAP  # the gap study's tiny scenario: 8 one-token clients are too few cycles

    result = kvsim.run(kvsim.parse_scenario(GAP, "g.yaml"))
    frame = gap_frame(result)
    for _, row in frame.iterrows():
        high, low = result.scenario.spec.study.configs[row.option]
        flagged = bool(result.run(high, row.point).summary["flags"] or result.run(low, row.point).summary["flags"])
        assert row.flagged == flagged
    assert frame.flagged.any() and not frame.flagged.all()
    text = gap_markdown(result, frame)
    marked = [line for line in text.splitlines() if line.startswith("| none |") and f"{FLAG_MARK} |" in line]
    assert len(marked) == int(frame[frame.option == "none"].flagged.sum())
    assert f"\\{FLAG_MARK} not a steady-state number" in text


# ------------------------------------------------------------------- warmup: auto (MSER-5)

BURST = """
name: burst
seed: 4
duration: 300 s
warmup: {warmup}
model: qwen3-8b
workload:
  arrival: {{kind: stages, stages: [{{rate: 6/s, duration: 20 s}}, {{rate: 1/s, duration: 280 s}}]}}
  input_tokens: {{kind: lognormal, median: 1000, sigma: 0.5, max: 4000}}
  output_tokens: {{kind: lognormal, median: 150, sigma: 0.5, max: 1000}}
systems:
  one: {{node: l20-8x, instances: 1}}
"""


def _without(summary: dict, *keys: str) -> dict:
    return {k: v for k, v in summary.items() if k not in keys}


def test_auto_warmup_cuts_an_initial_burst_and_equals_a_fixed_run_at_that_warmup():
    # 20 s at 6/s into one L20 instance that serves ~2.5/s builds a backlog of ~70 requests,
    # served off at ~1.5/s after the burst: the transient lasts well past 20 s
    fixed0 = kvsim.run(kvsim.parse_scenario(BURST.format(warmup="0 s"), "b.yaml")).runs[0]
    assert "warmup_short" in fixed0.summary["flags"]
    auto = kvsim.run(kvsim.parse_scenario(BURST.format(warmup="auto"), "b.yaml")).runs[0]
    window = auto.summary["window"]
    assert window["warmup"] == "mser5" and window["end_s"] == 300.0
    found = window["start_s"]
    assert found == fixed0.summary["steady_state"]["mser5_warmup_s"]  # what the first pass detected
    assert 20.0 < found <= 150.0  # past the burst, inside the half MSER-5 searches
    assert auto.summary["flags"] == []
    assert auto.summary["ttft_s"]["p99"] < fixed0.summary["ttft_s"]["p99"]
    # the warm-up only places the window: same records, and the summary of a fixed run at it
    assert auto.records.to_frame().equals(fixed0.records.to_frame())
    fixed = kvsim.run(kvsim.parse_scenario(BURST.format(warmup=f"{found!r} s"), "b.yaml")).runs[0]
    assert fixed.summary["window"] == {**window, "warmup": "fixed"}
    assert _without(auto.summary, "window") == _without(fixed.summary, "window")


def test_auto_warmup_is_written_auto_and_validated_like_a_duration(tmp_path):
    scenario = kvsim.parse_scenario(BURST.format(warmup="Auto"), "b.yaml")
    assert scenario.spec.warmup == 0.0 and scenario.spec.warmup_auto
    assert scenario.with_changes({"warmup": "10 s"}).spec.warmup_auto is False
    with pytest.raises(kvsim.SpecError) as info:
        kvsim.parse_scenario(BURST.format(warmup="automatic"), "b.yaml")
    assert "b.yaml:5: warmup:" in str(info.value)
    from jsonschema import Draft202012Validator

    from kvsim.scenario.json_schema import scenario_json_schema

    validator = Draft202012Validator(scenario_json_schema())
    assert validator.is_valid({**scenario.raw, "warmup": "auto"})
    assert not validator.is_valid({**scenario.raw, "warmup": "automatic"})


# ------------------------------------------------------- prompt tokens count chunk by chunk

ONE_LONG_PROMPT = """
name: chunks
seed: 1
duration: 60 s
warmup: {warmup} s
model: qwen3-8b
workload:
  arrival: {{kind: stages, stages: [{{rate: 0.1/s, duration: 10 s}}]}}
  input_tokens: {{kind: fixed, value: 32768}}
  output_tokens: {{kind: fixed, value: 4}}
systems:
  one: {{node: l20-8x, instances: 1, instance: {{max_batched_tokens: 2048}}}}
"""


def test_prompt_tokens_count_per_chunk_on_both_sides_of_the_window_edge():
    # one 32,768-token prompt prefilled in 16 chunks of 2,048; open the window halfway through
    whole = kvsim.run(kvsim.parse_scenario(ONE_LONG_PROMPT.format(warmup=0), "c.yaml")).runs[0]
    assert whole.summary["input_tokens_per_s"] * 60.0 == pytest.approx(32768)
    records = whole.records
    start_s, end_s = float(records.column("admit_s")[0]), float(records.column("first_token_s")[0])
    assert end_s - start_s > 0.5  # long enough to cut inside it
    cut = start_s + 0.5 * (end_s - start_s)
    split = kvsim.run(kvsim.parse_scenario(ONE_LONG_PROMPT.format(warmup=repr(cut)), "c.yaml")).runs[0]
    counted = round(split.summary["input_tokens_per_s"] * (60.0 - cut))
    # counted when each chunk's batch ends: the chunks after the cut, a whole number of them
    assert counted % 2048 == 0 and 0 < counted < 32768
    assert counted == pytest.approx(16384, abs=2 * 2048)  # chunks take about equal time


def test_a_swept_duration_states_each_points_window_not_the_files():
    # offload_gap.yaml sweeps duration and warm-up with the prompt length: the top-level values are
    # nobody's window, and the printed table must not claim them
    text = OPEN.format(duration=120, warmup=10, rate=2) + (
        "sweep:\n  \"duration, warmup\": [[20 s, 5 s], [30 s, 10 s]]\n")
    result = kvsim.run(kvsim.parse_scenario(text, "s.yaml"))
    assert [(r.summary["window"]["start_s"], r.summary["window"]["end_s"]) for r in result.runs] == [(5, 20), (10, 30)]
    phrase = result.window_phrase()
    assert phrase == "[5 s, 20 s], [10 s, 30 s] of simulated time (one window per sweep point)"
    assert "measured over [5 s, 20 s], [10 s, 30 s]" in comparison_table(result)
    plain = kvsim.run(kvsim.parse_scenario(OPEN.format(duration=20, warmup=5, rate=2), "s.yaml"))
    assert plain.window_phrase() == "[5 s, 20 s] of simulated time"
