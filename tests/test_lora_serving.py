"""Serving LoRA adapters: their KV identity, the slots a step may mix, what a switch costs, and
what their slots take from the KV cache."""

from __future__ import annotations

import numpy as np
import pytest

import kvsim
from kvsim.cli import main
from kvsim.hardware import accelerator_catalog
from kvsim.models import model_catalog
from kvsim.models.lora import adapter_bytes
from kvsim.serving.adapters import AdapterSlots, adapter_block_ids
from kvsim.serving.sequence import Sequence

SCENARIO = """name: lora
duration: {duration}
warmup: 5 s
model: llama-3.1-8b
workload:
  arrival: {{kind: poisson, rate: {rate}}}
  prefix: {{kind: shared_documents, documents: {documents}, zipf_s: 0.0,
           document_tokens: {{kind: fixed, value: 4096}}, suffix_tokens: {{kind: fixed, value: 64}}}}
  output_tokens: {{kind: fixed, value: 16}}
  adapters: {{count: 8, rank: 16}}
systems:
{systems}
"""


def _system(name: str, lora: str, cache: str = "kv_cache: {}") -> str:
    return f"  {name}: {{node: h100-8x, nodes: 1, instances: 1, instance: {{tp: 1}}, {cache}, lora: {lora}}}"


def _run(systems: list[str], duration: str = "40 s", rate: str = "4/s", documents: int = 2):
    text = SCENARIO.format(duration=duration, rate=rate, documents=documents, systems="\n".join(systems))
    return kvsim.run(kvsim.parse_scenario(text, "lora.yaml"))


def test_block_ids_keep_prefix_identity_per_adapter():
    h = np.arange(10, 20, dtype=np.int64)
    a3, a3_again, a4 = (adapter_block_ids(h, 3, 4), adapter_block_ids(h.copy(), 3, 4), adapter_block_ids(h, 4, 4))
    assert np.array_equal(a3, a3_again)                      # deterministic
    assert np.array_equal(a3[:4], h[:4])                     # the shared context keeps the base ids
    assert not np.any(np.isin(a3[4:], h)) and not np.any(np.isin(a3[4:], a4[4:]))  # its own KV is its own
    assert np.array_equal(adapter_block_ids(h, -1, 0), h)    # the base model's request: unchanged
    assert not np.any(np.isin(adapter_block_ids(h, 3, 0), h))  # nothing shared: every block salted
    # a longer prompt of the same adapter and text extends the same ids (prefix identity)
    longer = np.arange(10, 25, dtype=np.int64)
    assert np.array_equal(adapter_block_ids(longer, 3, 4)[:10], a3)


def test_slots_admit_at_most_max_loras_adapters_and_charge_each_copy():
    slots = AdapterSlots(max_loras=2, load_s=0.003)
    running = [Sequence(i, 10, 10) for i in range(3)]
    running[0].adapter, running[1].adapter, running[2].adapter = 5, 5, 6
    new = Sequence(9, 10, 10)
    new.adapter = 7
    active = slots.active(running)
    assert active == {5, 6}
    assert not slots.fits(new, active)           # 5 and 6 already fill two slots
    new.adapter = 6
    assert slots.fits(new, active)               # its adapter is already in the step
    base = Sequence(10, 10, 10)
    assert slots.fits(base, active)              # the base model needs no slot
    assert slots.activate([5, 5, 6]) == pytest.approx(2 * 0.003)  # two copies
    assert slots.activate([6, 5]) == 0.0                             # both resident
    assert slots.activate([7, 6]) == pytest.approx(0.003)           # 7 evicts 5, the least recently used
    assert list(slots.resident) == [6, 7] and slots.loads == 3


def test_byte_sharing_serves_every_adapter_from_one_copy_and_none_keeps_one_per_adapter():
    result = _run([_system("none", "{kv_sharing: none}"), _system("shared", "{kv_sharing: byte_sharing}")])
    by_name = {run.system: run for run in result.runs}
    frames = {name: run.records.to_frame() for name, run in by_name.items()}
    for frame in frames.values():
        assert set(frame.adapter) <= set(range(8)) and (frame.adapter >= 0).all()
    # with no reuse each (document, adapter) pair computes its document once: 2 x 8 first uses
    none, shared = frames["none"], frames["shared"]
    doc_blocks = 4096 // 16
    cold_none = int((none.hit_tokens_hbm < doc_blocks * 16).sum())
    cold_shared = int((shared.hit_tokens_hbm < doc_blocks * 16).sum())
    assert cold_none == 16 and cold_shared == 2
    # bytes: the shared system holds the two documents once, the other sixteen times (both also
    # keep the requests' own suffix blocks cached, the same in both)
    peak_none, peak_shared = by_name["none"].summary["kv_bytes_peak"], by_name["shared"].summary["kv_bytes_peak"]
    doc_bytes = 4096 * model_catalog()["llama-3.1-8b"].kv_bytes_per_token("bf16")
    assert peak_none - peak_shared == pytest.approx(14 * doc_bytes, rel=0.1)
    assert by_name["shared"].summary["lora"]["kv_sharing"] == "byte_sharing"


def test_one_slot_serialises_adapters_and_pays_a_copy_per_switch(monkeypatch):
    seen = []
    real = AdapterSlots.activate

    def spy(self, adapters):
        adapters = list(adapters)
        seen.append((self.max_loras, len({a for a in adapters if a >= 0})))
        return real(self, adapters)

    monkeypatch.setattr(AdapterSlots, "activate", spy)
    result = _run([_system("one", "{max_loras: 1}"), _system("all", "{}")], duration="20 s", rate="8/s")
    assert seen and all(distinct <= slots for slots, distinct in seen)
    runs = {run.system: run for run in result.runs}
    assert runs["one"].summary["lora"]["adapter_loads"] > 8 > 0 < runs["all"].summary["lora"]["adapter_loads"] <= 8
    assert runs["one"].summary["ttft_s"]["p99"] > runs["all"].summary["ttft_s"]["p99"]


def test_adapter_slots_come_out_of_the_kv_cache_by_hand(built_systems):
    result = _run([_system("eight", "{}"), _system("two", "{max_loras: 2}")], duration="6 s")
    pools = {run.system: run.sizing.pools[0] for run in result.runs}
    one = adapter_bytes(model_catalog()["llama-3.1-8b"], 16, ("q", "k", "v", "o"), "bf16")
    assert one == pytest.approx(2 * 13_631_488)
    diff = pools["two"].kv_budget_bytes_per_card - pools["eight"].kv_budget_bytes_per_card
    assert diff == pytest.approx(6 * one)
    # and a copy into a slot crosses the card's host link at its achieved rate
    h100 = accelerator_catalog()["h100-sxm"]
    slots = built_systems[0].instances[0].adapters
    assert slots.max_loras == 8 and built_systems[1].instances[0].adapters.max_loras == 2
    assert slots.load_s == pytest.approx(one / (h100.host_link_bandwidth * h100.efficiency.host_copy))


def test_value_reuse_copies_another_adapters_kv_instead_of_computing_it_and_saves_no_bytes():
    result = _run([_system("none", "{kv_sharing: none}"), _system("value", "{kv_sharing: value_reuse}"),
                   _system("shared", "{kv_sharing: byte_sharing}")])
    runs = {run.system: run for run in result.runs}
    frames = {name: run.records.to_frame() for name, run in runs.items()}
    doc = 4096
    none, value, shared = frames["none"], frames["value"], frames["shared"]
    # no reuse computes each document once per adapter; reuse computes it about once in all (a
    # request that arrives while the first computation of its document runs computes it too)
    cold = {name: int((frame.hit_tokens_hbm < doc).sum()) for name, frame in frames.items()}
    assert cold["none"] == 16 and 2 <= cold["value"] <= 4 and 2 <= cold["shared"] <= 4
    # value reuse fills each (document, adapter) pair's own copy once, from another adapter's
    copies = value[(value.loaded_bytes > 0)]
    block_bytes = 16 * model_catalog()["llama-3.1-8b"].kv_bytes_per_token("bf16")
    assert len(copies) == 16 - cold["value"] and (copies.loaded_bytes == doc // 16 * block_bytes).all()
    assert (copies.hit_tokens_hbm == doc).all()
    assert (shared.loaded_bytes == 0).all() and (none.loaded_bytes == 0).all()
    # the copies keep one per adapter, as with no reuse: the bytes are not saved
    assert runs["value"].summary["kv_bytes_peak"] == pytest.approx(runs["none"].summary["kv_bytes_peak"], rel=0.02)
    assert runs["shared"].summary["kv_bytes_peak"] < 0.5 * runs["value"].summary["kv_bytes_peak"]
    # and a copy inside the card is much faster than the prefill it replaces
    copied = value.loc[copies.index]
    computed = none.loc[copies.index]
    assert (copied.first_token_s - copied.arrival_s).mean() < 0.5 * (computed.first_token_s - computed.arrival_s).mean()


@pytest.mark.parametrize("lora, extra, message", [
    ("{kv_sharing: byte_sharing}", "drop_adapters", "names no adapters"),
    ("{max_loras: 9}", "", "9 slots for 8 adapters"),
    ("{kv_sharing: byte_sharing}", "no_cache", "give kv_cache"),
    ("{kv_sharing: value_reuse}", "read_in_place", "with peer_hbm: read_in_place use byte_sharing"),
])
def test_bad_lora_settings_are_refused(tmp_path, capsys, lora, extra, message):
    cache = {"no_cache": "", "read_in_place": "kv_cache: {peer_hbm: read_in_place}, "}.get(extra, "kv_cache: {}, ")
    text = SCENARIO.format(duration="10 s", rate="1/s", documents=2,
                           systems=f"  s: {{node: h100-8x, nodes: 1, instances: 1, instance: {{tp: 1}}, {cache}lora: {lora}}}")
    if extra == "drop_adapters":
        text = text.replace("  adapters: {count: 8, rank: 16}\n", "")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and "bad.yaml:" in err


def test_adapters_on_an_mla_model_are_refused(tmp_path, capsys):
    text = SCENARIO.format(duration="10 s", rate="1/s", documents=2,
                           systems="  s: {node: h100-8x, nodes: 1, instances: 1, instance: {tp: 8}}")
    path = tmp_path / "mla.yaml"
    path.write_text(text.replace("model: llama-3.1-8b", "model: deepseek-r1\ndtype: fp8"))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "MLA" in err and "Traceback" not in err
