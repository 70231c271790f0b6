"""Collectives from measured curves (issue 27 item 1): ``engine.collectives: measured``.

Each interconnect's time is worked out by hand from the data file's points at a decode-sized
(latency-bound) and a prefill-sized (bandwidth-bound) message; the interpolation is monotone; an
unknown interconnect or card is refused by name; the default keeps the alpha-beta model, so
records do not move; a bad value in a scenario is one message naming the field.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import kvsim
from conftest import REPO
from kvsim.hardware import accelerator_catalog
from kvsim.models import model_catalog
from kvsim.models.collective_curves import COLLECTIVES, collective_curves, collective_s, interconnect_for, load_curves
from kvsim.models.collectives import allreduce_s
from kvsim.models.engine import EngineSpec
from kvsim.models.parallel import GroupLinks, alltoall_s, group_allreduce_s
from kvsim.models.step_time import RooflineStepTime
from kvsim.yaml_io import SpecError

US = 1e-6
MIB = 1024 * 1024


# ------------------------------------------------------------------ each interconnect by hand


def test_nvlink4_small_messages_are_latency_bound_large_ones_bandwidth_bound():
    # 4 KiB on 4 cards: between the 512 B and 32 KiB points, both 4.8 us
    assert collective_s("all_reduce", 4096, 4, "nvlink4-nvswitch") == pytest.approx(4.8 * US)
    # below the first point: the first point's time
    assert collective_s("all_reduce", 64, 8, "nvlink4-nvswitch") == pytest.approx(5.9 * US)
    # the log-midpoint of 32 KiB and 256 KiB on 2 cards: the geometric mean of 4.5 and 7.9 us
    mid = math.sqrt(32768 * 262144)
    assert collective_s("all_reduce", mid, 2, "nvlink4-nvswitch") == pytest.approx(math.sqrt(4.5 * 7.9) * US)
    # 64 MiB on 8 cards: the 1 MiB point plus the rest at 370 GB/s busbw, bus factor 2 x 7/8
    big = 64 * MIB
    expected = 33.8 * US + (big - MIB) * 1.75 / 370e9
    assert collective_s("all_reduce", big, 8, "nvlink4-nvswitch") == pytest.approx(expected)
    assert (big - MIB) * 1.75 / 370e9 > 5 * 33.8 * US  # bandwidth-bound


def test_nvlink3_scales_the_largest_measured_rank_count_by_the_bus_factor():
    # 8 cards: the 4-card curve x (2 x 7/8) / (2 x 3/4); at 4 KiB 12.1 us -> 14.12 us (PR 2688 measured 14.2)
    assert collective_s("all_reduce", 4096, 8, "nvlink3-nvswitch") == pytest.approx(12.1 * US * 1.75 / 1.5)
    big = 256 * MIB
    expected = 47.1 * US + (big - MIB) * 1.5 / 230e9
    assert collective_s("all_reduce", big, 4, "nvlink3-nvswitch") == pytest.approx(expected)


def test_pcie_gen4_interpolates_between_the_switch_and_the_root_complex():
    # 4 cards sit halfway (in log ranks) between the 2-card and 8-card curves: geometric mean.
    # At 256 B the 2-card curve is at its floor (8.3 us), the 8-card one at the log-midpoint of
    # 8 B and 8 KiB: sqrt(42.1 x 56.9) us
    t8 = math.sqrt(42.1 * 56.9)
    assert collective_s("all_reduce", 256, 8, "pcie-gen4") == pytest.approx(t8 * US)
    assert collective_s("all_reduce", 256, 4, "pcie-gen4") == pytest.approx(math.sqrt(8.3 * t8) * US)
    # large, 2 cards under one switch: 25 GB/s busbw, bus factor 1
    big = 64 * MIB
    assert collective_s("all_reduce", big, 2, "pcie-gen4") == pytest.approx(8.3 * US + (big - 8192) / 25e9)
    # 8 cards across the root complex: 14 GB/s
    assert collective_s("all_reduce", big, 8, "pcie-gen4") == pytest.approx(169.4 * US + (big - 262144) * 1.75 / 14e9)


def test_pcie_gen5_ub_and_rdma_by_hand():
    big = 128 * MIB
    assert collective_s("all_reduce", big, 8, "pcie-gen5") == pytest.approx(169.4 * US + (big - 262144) * 1.75 / 28e9)
    assert collective_s("all_reduce", 1000, 8, "pcie-gen5") == pytest.approx(
        42.1 * US * (56.9 / 42.1) ** (math.log(1000 / 8) / math.log(8192 / 8)))
    assert collective_s("all_reduce", 512, 8, "ub") == pytest.approx(5.9 * US)
    assert collective_s("all_reduce", big, 8, "ub") == pytest.approx(33.8 * US + (big - MIB) * 1.75 / 822e9)
    # RDMA between nodes: 16 ranks measured; 1 KiB at the floor, 1 GiB past the last point
    assert collective_s("all_reduce", 1024, 16, "roce-ib") == pytest.approx(15.6 * US)
    gib = 1024 * MIB
    last = 201326592
    at16 = 1841.5 * US + (gib - last) * (2 * 15 / 16) / 205e9
    assert collective_s("all_reduce", gib, 16, "roce-ib") == pytest.approx(at16)
    # 32 ranks: beyond the measured ones, scaled by the bus factor (2 x 31/32) / (2 x 15/16)
    assert collective_s("all_reduce", gib, 32, "roce-ib") == pytest.approx(at16 * (31 / 32) / (15 / 16))


def test_collectives_not_measured_derive_from_the_all_reduce_by_equal_bus_bytes():
    big = 64 * MIB
    for kind in ("all_gather", "reduce_scatter", "all_to_all"):
        # (n-1)/n x S bytes on the bus: an all-reduce of S/2
        assert collective_s(kind, big, 8, "nvlink4-nvswitch") == pytest.approx(
            33.8 * US + (big / 2 - MIB) * 1.75 / 370e9)
        assert collective_s(kind, 4096, 8, "nvlink4-nvswitch") == pytest.approx(
            collective_s("all_reduce", 2048, 8, "nvlink4-nvswitch"))


def test_one_card_or_no_bytes_costs_nothing():
    assert collective_s("all_reduce", MIB, 1, "nvlink4-nvswitch") == 0.0
    assert collective_s("all_to_all", 0, 8, "nvlink4-nvswitch") == 0.0


# ------------------------------------------------------------------ shape


@pytest.mark.parametrize("name", sorted(collective_curves().interconnects))
def test_interpolation_is_monotone_in_the_message_size(name):
    sizes = np.logspace(0, 32, 400, base=2.0)
    for kind in COLLECTIVES:
        for ranks in (2, 3, 4, 6, 8, 12, 16, 32, 64):
            times = [collective_s(kind, float(s), ranks, name) for s in sizes]
            assert all(b >= a for a, b in zip(times, times[1:])), (name, kind, ranks)
            assert times[0] > 0


def test_decode_sized_all_reduce_is_latency_bound_and_prefill_sized_bandwidth_bound():
    """An all-reduce of one decode batch (32 x 8192 x 2 B = 512 KiB) costs a few times the
    latency floor; one of an 8,192-token prefill (128 MiB) costs its bus bytes at busbw."""
    for name, icn in collective_curves().interconnects.items():
        for ranks, curve in icn.curves["all_reduce"].items():
            floor = curve.times_s[0]
            decode = collective_s("all_reduce", 32 * 8192 * 2, ranks, name)
            assert decode < 12 * floor, (name, ranks)
            prefill = 128 * MIB
            wire = prefill * 2 * (ranks - 1) / ranks / curve.busbw_Bps
            assert wire <= collective_s("all_reduce", prefill, ranks, name) < 1.5 * wire + floor * 40, (name, ranks)


# ------------------------------------------------------------------ refusals


def test_an_unknown_interconnect_is_refused_by_name():
    with pytest.raises(ValueError, match=r"no measured collective curves for interconnect 'nvlink9'.*known: .*"
                                         r"nvlink4-nvswitch"):
        collective_s("all_reduce", 1024, 8, "nvlink9")
    with pytest.raises(ValueError, match="unknown collective 'broadcast'"):
        collective_s("broadcast", 1024, 8, "nvlink4-nvswitch")


def test_cards_map_to_their_interconnect_and_an_unlisted_scale_up_card_is_refused():
    cards = accelerator_catalog()
    assert interconnect_for(cards["h100-sxm"]).name == "nvlink4-nvswitch"
    assert interconnect_for(cards["l20"]).name == "pcie-gen4"
    unlisted_pcie = cards["l20"].model_copy(update={"name": "my-pcie-card", "host_link": "PCIe Gen5 x16"})
    assert interconnect_for(unlisted_pcie).name == "pcie-gen5"
    unlisted = cards["h100-sxm"].model_copy(update={"name": "my-nvlink-card"})
    with pytest.raises(ValueError, match=r"no measured collective curve for card 'my-nvlink-card'.*collectives\.yaml"):
        interconnect_for(unlisted)


def _data(**change):
    base = {"interconnects": {"x": {"all_reduce": {"ranks": {2: {"points": [[8, 1.0], [1024, 2.0]]}},
                                                   "busbw_GBps": 10, "source": "s", "confidence": "M"}}},
            "between_domains": "x"}
    base["interconnects"]["x"]["all_reduce"].update(change)
    return base


@pytest.mark.parametrize("change, words", [
    ({"ranks": {2: {"points": [[8, 2.0], [1024, 1.0]]}}}, "interconnects.x.all_reduce.ranks.2: times must not decrease"),
    ({"ranks": {2: {"points": [[1024, 1.0], [8, 2.0]]}}}, "message sizes must increase"),
    ({"ranks": {1: {"points": [[8, 1.0]]}}}, "rank count 1 must be an integer >= 2"),
    ({"busbw_GBps": 0}, "busbw_GBps must be a positive number"),
    ({"source": ""}, "needs a source"),
    ({"confidence": "high"}, "confidence must be one of H, M, L, ASSUMPTION"),
])
def test_a_bad_data_file_entry_is_one_message_naming_it(change, words):
    with pytest.raises(ValueError, match=re.escape(words)) as error:
        load_curves(_data(**change))
    assert "collectives.yaml" in str(error.value)


# ------------------------------------------------------------------ the engine choice


def _step(engine: EngineSpec, tp: int = 4) -> RooflineStepTime:
    return RooflineStepTime(model_catalog()["llama-3.1-70b"], accelerator_catalog()["h100-sxm"], tp, "bf16", "bf16",
                            engine=engine)


def test_the_default_is_the_alpha_beta_model():
    assert EngineSpec().collectives == "alpha_beta"
    step = _step(EngineSpec())
    acc = accelerator_catalog()["h100-sxm"]
    nbytes = 32 * 8192 * 2
    expected = 2 * 80 * allreduce_s(nbytes, 4, acc.efficiency.collective_latency_s,
                                    acc.peer_bandwidth * acc.efficiency.interconnect)
    assert step.comm_s(32) == pytest.approx(expected, rel=1e-12)


def test_measured_collectives_price_the_roofline_all_reduces_from_the_curve():
    step = _step(EngineSpec(collectives="measured"))
    nbytes = 32 * 8192 * 2  # 512 KiB: the 4-card point, 20.2 us
    assert step.comm_s(32) == pytest.approx(2 * 80 * 20.2 * US)
    assert step.comm_s(32) < _step(EngineSpec()).comm_s(32)
    assert nbytes == 524288


def test_measured_nccl_uses_nccl_alone_where_the_file_measures_it():
    cards = accelerator_catalog()
    assert interconnect_for(cards["h100-sxm"], "measured_nccl").name == "nvlink4-nvswitch-nccl"
    assert interconnect_for(cards["l20"], "measured_nccl").name == "pcie-gen4"  # NCCL's already
    # 8 cards at 24 KiB: between the 16 KiB (20.71 us) and 32 KiB (22.65 us) points, log-log
    expected = 20.71 * US * (22.65 / 20.71) ** (math.log(24576 / 16384) / math.log(2))
    assert collective_s("all_reduce", 24576, 8, "nvlink4-nvswitch-nccl") == pytest.approx(expected)
    # 2 cards: the 8-card curve scaled by the bus factor 1 / 1.75
    assert collective_s("all_reduce", 128, 2, "nvlink4-nvswitch-nccl") == pytest.approx(19.19 * US / 1.75)
    big = 128 * MIB  # past 16 MiB at NVLS's 480 GB/s
    assert collective_s("all_reduce", big, 8, "nvlink4-nvswitch-nccl") == pytest.approx(
        135.68 * US + (big - 16 * MIB) * 1.75 / 480e9)
    step = _step(EngineSpec(collectives="measured_nccl"), tp=8)
    assert step.comm_s(1) == pytest.approx(2 * 80 * 20.71 * US)  # one token: 8192 x 2 B = the 16 KiB point

    links = GroupLinks(cards=8, domains=1, local_Bps=378e9, local_latency_s=10e-6)
    assert group_allreduce_s(MIB, links, "nvlink4-nvswitch") == pytest.approx(33.8 * US)
    spanning = GroupLinks(cards=16, domains=2, local_Bps=378e9, local_latency_s=10e-6, remote_Bps=50e9,
                          remote_latency_s=20e-6)
    assert group_allreduce_s(1024, spanning, "nvlink4-nvswitch") == pytest.approx(15.6 * US)  # RDMA curve
    # all-to-all: a card sends nbytes to the 7 others; nccl-tests' size is 8/7 of that
    sent = 7 * MIB
    assert alltoall_s(sent, links, 1.0, "nvlink4-nvswitch") == pytest.approx(
        collective_s("all_to_all", sent * 8 / 7, 8, "nvlink4-nvswitch"))
    # without an interconnect: today's closed forms
    assert group_allreduce_s(MIB, links) == pytest.approx(allreduce_s(MIB, 8, 10e-6, 378e9))


def _scenario(tmp_path, engine_line: str):
    text = (REPO / "scenarios" / "h20_vs_l20.yaml").read_text()
    path = tmp_path / "s.yaml"
    path.write_text(text + engine_line)
    return path


def test_a_bad_collectives_value_is_one_message_naming_the_field(tmp_path):
    with pytest.raises(SpecError) as error:
        kvsim.load_scenario(_scenario(tmp_path, "\nengine: {collectives: nccl}\n"))
    message = str(error.value)
    assert re.search(r"s\.yaml:\d+: engine\.collectives: .*'nccl'", message), message
    assert "alpha_beta" in message and "measured" in message


SCALE_UP_CARD = """\
name: mine
seed: 3
duration: 4 s
model: qwen3-8b
workload:
  arrival: {kind: closed_loop, clients: 4}
  input_tokens: {kind: fixed, value: 256}
  output_tokens: {kind: fixed, value: 8}
catalog:
  accelerators:
    my-nvlink-card: {base: h100-sxm}
  nodes:
    my-node: {base: h100-8x, accelerator: my-nvlink-card}
systems:
  s: {node: my-node, instance: {tp: 2}}
"""


def test_a_scale_up_card_without_a_curve_is_refused_at_sizing_naming_the_field(tmp_path):
    path = tmp_path / "card.yaml"
    path.write_text(SCALE_UP_CARD + "engine: {collectives: measured}\n")
    with pytest.raises(SpecError) as error:
        kvsim.run(kvsim.load_scenario(path))
    message = str(error.value)
    assert re.search(r"card\.yaml:\d+: engine\.collectives: no measured collective curve for card 'my-nvlink-card'",
                     message), message
    assert len(message.splitlines()) == 1
    path.write_text(SCALE_UP_CARD)  # the default prices it by alpha-beta, as before
    assert kvsim.run(kvsim.load_scenario(path)).runs[0].records.n > 0


def test_explicit_alpha_beta_runs_the_records_of_the_default_and_measured_moves_them(tmp_path):
    text = SCALE_UP_CARD.split("catalog:")[0] + "systems:\n  s: {node: h100-8x, instance: {tp: 4}}\n"
    digests = {}
    for name, extra in (("default", ""), ("alpha_beta", "engine: {collectives: alpha_beta}\n"),
                        ("measured", "engine: {collectives: measured}\n")):
        path = tmp_path / f"{name}.yaml"
        path.write_text(text + extra)
        digests[name] = kvsim.run(kvsim.load_scenario(path)).records_digest()
    assert digests["alpha_beta"] == digests["default"]
    assert digests["measured"] != digests["default"]
