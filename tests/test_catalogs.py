"""Tests for the shipped catalogs: accelerators, nodes and models.

Reference figures are typed in from ../shared/reference/hardware_facts.md (sections 1 and 3), not
read back from kvsim, so a wrong catalog entry or a wrong derivation fails here.
"""

import re

import pytest

from kvsim.hardware import accelerator_catalog, node_catalog
from kvsim.models import model_catalog
from kvsim.yaml_io import SpecError, load_yaml

ACCELERATORS = accelerator_catalog()
NODES = node_catalog()
MODELS = model_catalog()

# ---------------------------------------------------------------------------------------------
# (a) every figure has a source
# ---------------------------------------------------------------------------------------------

# Descriptive text fields: not figures, so they need no source entry.
# ``price_date`` dates the price, whose own source (``price_usd``) says where both come from.
# ``efficiency_basis`` classifies the sources of the ``efficiency`` figures (a scaled basis's ratio is
# cited in its figure's source: tests/test_efficiency_basis.py), and ``architecture`` names the chip.
_TEXT_FIELDS = {"vendor", "memory_kind", "host_link", "accelerator", "sources", "name", "price_date",
                "architecture", "efficiency_basis"}


def _unsourced_fields(raw: dict, sources: dict) -> list[str]:
    """Figures stated in a catalog entry that have no non-empty ``sources`` entry.

    The rule, read off kvsim/hardware/data/*.yaml:
    - every figure the YAML states (a quantity, a number, or a mapping of them such as ``flops``,
      ``efficiency``, ``nvme``, ``nics``) needs a source, keyed by the field name;
    - a mapping may instead be sourced field by field (``efficiency.memory``), in which case
      every field it states needs its own entry;
    - a figure stated as ``null`` (unknown / absent, e.g. no NVLink, no public price) needs a
      source that says why.
    Defaults that the YAML does not state are the code's, not the catalog's, and are not checked.
    """

    def has(key):
        text = sources.get(key)
        return isinstance(text, str) and text.strip() != ""

    missing = []
    for key, value in raw.items():
        if key in _TEXT_FIELDS:
            continue
        if isinstance(value, dict) and not has(key):
            missing.extend(f"{key}.{sub}" for sub in value if not has(f"{key}.{sub}"))
        elif not has(key):
            missing.append(key if value is not None else f"{key} (null, no reason given)")
    return missing


@pytest.mark.parametrize("name", ACCELERATORS.names())
def test_every_accelerator_figure_has_a_source(name):
    raw = ACCELERATORS.raw[name]
    missing = _unsourced_fields(raw, raw.get("sources", {}))
    assert not missing, f"accelerator {name}: figures without a source: {missing}"


@pytest.mark.parametrize("name", NODES.names())
def test_every_node_figure_has_a_source(name):
    raw = NODES.raw[name]
    missing = _unsourced_fields(raw, raw.get("sources", {}))
    assert not missing, f"node {name}: figures without a source: {missing}"


@pytest.mark.parametrize("catalog", [ACCELERATORS, NODES], ids=["accelerators", "nodes"])
def test_source_keys_name_real_fields(catalog):
    # A misspelt source key ("memory_bandwith") would leave the real figure unsourced while
    # looking sourced; every key's first component must be a field of the spec, or an engine default
    # measured on this card (``engine.kernel_s``: a field of EngineSpec).
    from kvsim.models.engine import EngineSpec

    fields = set(catalog.spec_type.model_fields)
    for name in catalog.names():
        for key in catalog.raw[name]["sources"]:
            head, _, rest = key.partition(".")
            assert head in fields or (head == "engine" and rest in EngineSpec.model_fields), (name, key)


def test_unsourced_rule_detects_gaps():
    # The checker itself must be able to fail: a stated figure, a null and a partly sourced
    # mapping, each without a source.
    raw = {"vendor": "X", "memory_bytes": "1 GB", "price_usd": None,
           "efficiency": {"compute": 0.5, "memory": 0.5}}
    sources = {"efficiency.compute": "measured"}
    assert sorted(_unsourced_fields(raw, sources)) == [
        "efficiency.memory", "memory_bytes", "price_usd (null, no reason given)",
    ]


@pytest.mark.parametrize("name", NODES.names())
def test_node_accelerator_exists(name):
    assert NODES[name].accelerator in ACCELERATORS


@pytest.mark.parametrize("name", MODELS.names())
def test_every_model_cites_its_architecture(name):
    assert MODELS[name].sources.get("architecture", "").strip() != ""


# ---------------------------------------------------------------------------------------------
# (b) the entries the issue requires
# ---------------------------------------------------------------------------------------------

REQUIRED_ACCELERATORS = [
    "h20", "l20", "l40s", "rtx-4090", "a100-sxm", "h100-sxm", "h200-sxm", "ascend-950pr", "ascend-950dt",
]
REQUIRED_MODELS = [
    "llama-3.1-8b", "llama-3.1-70b", "llama-2-7b", "qwen3-1.7b", "qwen3-8b", "qwen3-32b",
    "qwen3-235b-a22b", "deepseek-r1",
]


@pytest.mark.parametrize("name", REQUIRED_ACCELERATORS)
def test_required_accelerator_present(name):
    assert name in ACCELERATORS, ACCELERATORS.unknown_message(name)


@pytest.mark.parametrize("name", REQUIRED_MODELS)
def test_required_model_present(name):
    assert name in MODELS, MODELS.unknown_message(name)


# Section 1 of hardware_facts.md: memory, bandwidth (B/s), dense bf16 / fp8 FLOP/s,
# scale-up link per direction (None = no NVLink), host link per direction (PCIe Gen5 x16 = 64 GB/s,
# Gen4 x16 = 32 GB/s). RTX 4090 uses the FP32-accumulate rates (165 / 330) as the facts advise.
# Memory of HBM parts is what the driver exposes (nvidia-smi MiB), which is what an engine can
# allocate; the marketing "96 GB" / "80 GB" / "141 GB" understate it by 2-7%. The same holds for the
# GDDR cards whose driver figure is public (L40S 46,068 MiB, RTX 4090 24,564 MiB); the L20 keeps
# its decimal 48 GB (within 1% of the driver's figure).
MIB = 2**20
ACCELERATOR_FACTS = {
    "h20": (97_871 * MIB, 4.0e12, 148e12, 296e12, 450e9, 64e9),
    "l20": (48e9, 864e9, 119.5e12, 239e12, None, 32e9),
    "l40s": (46_068 * MIB, 864e9, 362e12, 733e12, None, 32e9),
    "rtx-4090": (24_564 * MIB, 1008e9, 165e12, 330e12, None, 32e9),
    "h100-sxm": (81_559 * MIB, 3.35e12, 989e12, 1979e12, 450e9, 64e9),
    "h200-sxm": (143_771 * MIB, 4.8e12, 989e12, 1979e12, 450e9, 64e9),
}


@pytest.mark.parametrize("name", sorted(ACCELERATOR_FACTS))
def test_nvidia_figures_match_facts(name):
    memory, bandwidth, bf16, fp8, scale_up, host = ACCELERATOR_FACTS[name]
    acc = ACCELERATORS[name]
    assert acc.memory_bytes == pytest.approx(memory, rel=1e-12)
    assert acc.memory_bandwidth == pytest.approx(bandwidth, rel=1e-12)
    assert acc.peak_flops("bf16") == pytest.approx(bf16, rel=1e-12)
    assert acc.peak_flops("fp8") == pytest.approx(fp8, rel=1e-12)
    if scale_up is None:
        assert acc.scale_up_bandwidth is None
        assert acc.peer_bandwidth == pytest.approx(host, rel=1e-12)  # peers talk over PCIe
    else:
        assert acc.scale_up_bandwidth == pytest.approx(scale_up, rel=1e-12)
    assert acc.host_link_bandwidth == pytest.approx(host, rel=1e-12)


def test_a100_sxm_figures():
    # The A100 SXM4 80GB as aiconfigurator's a100_sxm.yaml states it: 80 GiB (nvidia-smi shows
    # 81,920 MiB), 2.039 TB/s, 312 TFLOPS bf16 dense, NVLink 3 at 300 GB/s per direction (600 both
    # ways), PCIe Gen4, 400 W. Ampere has no FP8 tensor cores, so the catalog states no fp8 peak.
    acc = ACCELERATORS["a100-sxm"]
    assert acc.memory_bytes == 81_920 * MIB == 80 * 2**30
    assert acc.memory_bandwidth == pytest.approx(2.039e12, rel=1e-12)
    assert acc.peak_flops("bf16") == pytest.approx(312e12, rel=1e-12)
    assert "fp8" not in acc.flops
    assert 2 * acc.scale_up_bandwidth == pytest.approx(600e9, rel=1e-12)
    assert acc.peer_bandwidth == acc.scale_up_bandwidth  # collectives use NVLink, not PCIe
    assert acc.host_link_bandwidth == pytest.approx(32e9, rel=1e-12)
    assert acc.tdp_w == 400


def test_a100_node_is_a_dgx_a100():
    node = NODES["a100-8x"]
    assert node.accelerator == "a100-sxm" and node.accelerators_per_node == 8
    # Two EPYC 7742 (Rome): 8 channels of DDR4-3200, 8 bytes a transfer, per socket.
    assert node.host_dram_bandwidth == pytest.approx(2 * 8 * 3200e6 * 8, rel=1e-12)
    # One 200 Gb/s HDR port per GPU: aiconfigurator's 25 GB/s per GPU.
    assert node.nics.count == 8 and node.nics.bandwidth == pytest.approx(25e9, rel=1e-12)


# Every NVIDIA card's efficiencies were generic (compute 0.6, memory 0.8, paged KV at `memory`)
# until measurements were found. Every efficiency a card states must name its source with a
# confidence tag, and a figure still equal to the generic default must say it is an assumption, so
# a silent fallback cannot pass as measured. compute and memory must be stated explicitly for each.
# The memory figures are kernel-level ([AIC-DATA] in accelerators.yaml), so the paged-KV figure
# needs its own source too: stated with a tag, or, left unstated (reads at `memory`), labelled an
# assumption.
NVIDIA_CARDS = [name for name in ACCELERATORS.names() if ACCELERATORS[name].vendor == "NVIDIA"]
_TAG = re.compile(r"(^|[\s(,/])[HML](/[HML])?[),;]")


def _efficiency_source_problems(raw: dict) -> list[str]:
    from kvsim.hardware.specs import EfficiencySpec

    stated = raw.get("efficiency", {})
    sources = raw.get("sources", {})
    defaults = EfficiencySpec()
    problems = [f"efficiency.{f} not stated" for f in ("compute", "memory") if f not in stated]
    for field, value in stated.items():
        text = sources.get(f"efficiency.{field}", "")
        # a confidence tag as the catalog writes them: "(H)", "(M/H)", "..., M)", "..., M/L;"
        if not _TAG.search(text) and "assumption" not in text:
            problems.append(f"efficiency.{field}: no source with a confidence tag")
        if value == getattr(defaults, field) and "assumption" not in text and "default" not in text:
            problems.append(f"efficiency.{field}: equals the generic default but is not labelled an assumption")
    if "kv_memory" not in stated and "assumption" not in sources.get("efficiency.kv_memory", ""):
        problems.append("efficiency.kv_memory: not stated and not labelled an assumption")
    return problems


def test_every_nvidia_card_is_checked():
    assert set(NVIDIA_CARDS) >= {"h20", "l20", "l40s", "rtx-4090", "a100-sxm", "h100-sxm", "h200-sxm"}
    assert not {"ascend-950pr", "ascend-950dt"} & set(NVIDIA_CARDS)


@pytest.mark.parametrize("name", NVIDIA_CARDS)
def test_measured_efficiencies_carry_their_sources(name):
    assert not _efficiency_source_problems(ACCELERATORS.raw[name]), name


def test_efficiency_source_rule_can_fail():
    # An untagged source, an unlabelled generic value, a missing memory figure and a paged-KV
    # figure neither stated nor labelled are each caught.
    raw = {"efficiency": {"compute": 0.6, "interconnect": 0.5},
           "sources": {"efficiency.compute": "InferSim (H)", "efficiency.interconnect": "an L40S blog",
                       "efficiency.kv_memory": "reads at memory"}}
    assert sorted(_efficiency_source_problems(raw)) == [
        "efficiency.compute: equals the generic default but is not labelled an assumption",
        "efficiency.interconnect: no source with a confidence tag",
        "efficiency.kv_memory: not stated and not labelled an assumption",
        "efficiency.memory not stated",
    ]
    # A stated paged-KV figure needs a tag like any other; a bare "stand-in" is not one.
    raw = {"efficiency": {"compute": 0.5, "memory": 0.83, "kv_memory": 0.81},
           "sources": {"efficiency.compute": "TRT-LLM (H)", "efficiency.memory": "aiconfigurator tables, M)",
                       "efficiency.kv_memory": "stand-in: the L40S"}}
    assert _efficiency_source_problems(raw) == ["efficiency.kv_memory: no source with a confidence tag"]


@pytest.mark.parametrize("name", NVIDIA_CARDS)
def test_kernel_level_memory_efficiencies_are_fractions_of_the_peak(name):
    # Kernel-level streaming reaches most of the bus but never all of it (the STREAM-type
    # ceilings below are 0.87-0.98); anything outside (0.5, 1) is a typo or a unit slip.
    eff = ACCELERATORS[name].efficiency
    kv = eff.kv_memory if eff.kv_memory is not None else eff.memory
    assert 0.5 < eff.memory < 1.0 and 0.5 < kv < 1.0


# Cards without kernel tables of their own borrow those of the nearest card with the same memory
# system, as their sources say; the borrowed figures must track the lender's.
STAND_INS = {"l20": ("l40s", ("memory", "kv_memory")), "h20": ("h100-sxm", ("memory",))}


@pytest.mark.parametrize("name", sorted(STAND_INS))
def test_stand_in_efficiencies_equal_the_lenders(name):
    lender, fields = STAND_INS[name]
    card, other = ACCELERATORS[name], ACCELERATORS[lender]
    assert card.memory_kind == other.memory_kind  # GDDR6 and GDDR6, HBM3 and HBM3
    for field in fields:
        assert getattr(card.efficiency, field) == getattr(other.efficiency, field), field
        assert "Stand-in" in card.sources[f"efficiency.{field}"], field


def test_h20_paged_kv_is_the_h100_figure_scaled_by_the_infersim_ratio():
    # InferSim's FlashInfer decode, same shapes on both cards: H20 median 0.76 of 4.0 TB/s, H800
    # (the H100's HBM3 system) 0.93 of 3.35 TB/s; the ratio, printed 0.82, scales the H100's 0.85.
    h20, h100 = ACCELERATORS["h20"].efficiency, ACCELERATORS["h100-sxm"].efficiency
    assert h20.kv_memory == pytest.approx(0.82 * h100.kv_memory, abs=0.005)
    assert h20.kv_memory < h20.memory  # the 78-SM H20 loses more in attention than in GEMMs


@pytest.mark.parametrize("name", ["l40s", "a100-sxm"])
def test_measured_memory_efficiency_is_below_the_stream_ceiling(name):
    # Weight-streaming kernels cannot beat a pure read-stream kernel on the same memory: the
    # catalog's figure must sit under the STREAM-type ceiling its source quotes (L40: 844 of
    # 864 GB/s; A100 80 GB: 1769 of 2039 GB/s; te42kyfo/gpu-benches gpu-stream).
    ceiling = {"l40s": 844e9, "a100-sxm": 1769e9}[name]
    acc = ACCELERATORS[name]
    assert acc.memory_bandwidth * acc.efficiency.memory < ceiling
    assert acc.memory_bandwidth * acc.efficiency.kv_memory < ceiling


@pytest.mark.parametrize(
    "name, memory, bandwidth",
    [("ascend-950pr", 128e9, 1.6e12), ("ascend-950dt", 144e9, 4e12)],
)
def test_ascend_950_figures_match_facts(name, memory, bandwidth):
    acc = ACCELERATORS[name]
    assert acc.memory_bytes == pytest.approx(memory, rel=1e-12)
    assert acc.memory_bandwidth == pytest.approx(bandwidth, rel=1e-12)
    assert acc.peak_flops("fp8") == pytest.approx(1e15, rel=1e-12)
    assert acc.peak_flops("mxfp4") == pytest.approx(2e15, rel=1e-12)  # [HW-KEY] 2 PFLOPS MXFP4
    assert "bf16" not in acc.flops  # no BF16 figure was published
    # The keynote's "2 TB/s" interconnect, both directions together.
    assert 2 * acc.scale_up_bandwidth == pytest.approx(2e12, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# (c) derived model numbers vs the facts table (section 3)
# ---------------------------------------------------------------------------------------------

# name: (total B, active B, KV bytes/token BF16, FP8, linear GFLOP/token, attention MFLOP/pair)
MODEL_FACTS = {
    "deepseek-r1": (671.0, 37.5, 70_272, 35_136, 73.3, None),
    "qwen3-235b-a22b": (235.1, 22.2, 192_512, 96_256, 43.1, 3.080),
    "qwen3-32b": (32.8, 32.8, 262_144, 131_072, 64.0, 2.097),
    "qwen3-8b": (8.19, 8.19, 147_456, 73_728, 15.1, 0.590),
    "qwen3-1.7b": (1.72, 1.72, 114_688, 57_344, 2.8, 0.229),
    "llama-3.1-8b": (8.03, 8.03, 131_072, 65_536, 15.0, 0.524),
    "llama-3.1-70b": (70.6, 70.6, 327_680, 163_840, 139.0, 2.621),
    "llama-2-7b": (6.74, 6.74, 524_288, 262_144, 13.2, 0.524),
}


@pytest.mark.parametrize("name", sorted(MODEL_FACTS))
def test_param_counts_match_facts(name):
    total_b, active_b, *_ = MODEL_FACTS[name]
    model = MODELS[name]
    # The facts print these to 0.1 B or better (DeepSeek's 37.5 B active is 37.55 B unrounded).
    assert model.total_params / 1e9 == pytest.approx(total_b, abs=0.1)
    assert model.active_params / 1e9 == pytest.approx(active_b, abs=0.1)


@pytest.mark.parametrize("name", sorted(MODEL_FACTS))
def test_kv_bytes_per_token_match_facts_exactly(name):
    _, _, kv_bf16, kv_fp8, *_ = MODEL_FACTS[name]
    model = MODELS[name]
    assert model.kv_bytes_per_token("bf16") == kv_bf16
    assert model.kv_bytes_per_token("fp8") == kv_fp8
    assert model.kv_bytes_per_token_total("bf16") == kv_bf16


@pytest.mark.parametrize("name", sorted(set(MODEL_FACTS) - {"deepseek-r1"}))
def test_attention_flops_per_pair_match_facts(name):
    per_pair_mflop = MODEL_FACTS[name][5]
    model = MODELS[name]
    # Printed to 3 decimals in MFLOP: allow half a unit of the last digit.
    assert model.attention_flops_per_pair(decode=False) / 1e6 == pytest.approx(per_pair_mflop, abs=5e-4)
    # Standard attention costs the same per pair in prefill and decode.
    assert model.attention_flops_per_pair(decode=True) == model.attention_flops_per_pair(decode=False)


def test_deepseek_mla_attention_flops():
    model = MODELS["deepseek-r1"]
    # Prefill in MHA form: 2 * 61 layers * 128 heads * (qk 128 + 64 rope, v 128) = 4.997 MFLOP.
    assert model.attention_flops_per_pair(decode=False) == 2 * 61 * 128 * (128 + 64 + 128)
    assert model.attention_flops_per_pair(decode=False) / 1e6 == pytest.approx(4.997, abs=5e-4)
    # Decode absorbed onto the latent: qk 512 + 64, v 512 -> 16.99 MFLOP.
    assert model.attention_flops_per_pair(decode=True) == 2 * 61 * 128 * (512 + 64 + 512)
    assert model.attention_flops_per_pair(decode=True) / 1e6 == pytest.approx(16.99, abs=5e-3)


@pytest.mark.parametrize("name", sorted(set(MODEL_FACTS) - {"qwen3-1.7b"}))
def test_linear_flops_match_facts_for_untied_models(name):
    # Facts: linear GFLOP/token = 2 * (active - input embedding), printed to 0.1 GFLOP.
    gflop = MODEL_FACTS[name][4]
    assert MODELS[name].linear_flops_per_token / 1e9 == pytest.approx(gflop, abs=0.05)


def test_qwen3_1_7b_tied_embeddings_flops_by_hand():
    # Qwen3-1.7B ties lm_head to the input embedding. The facts table's 2.8 GFLOP is
    # 2 * (active - embedding), which drops the lm_head multiply; kvsim adds it back.
    model = MODELS["qwen3-1.7b"]
    L, h, nh, nkv, hd, ffn, vocab = 28, 2048, 16, 8, 128, 6144, 151_936
    embedding = vocab * h  # 311,164,928; counted once (tied)
    attention = 2 * h * nh * hd + 2 * h * nkv * hd + 2 * hd  # q, o, k, v projections + q/k norms
    per_layer = attention + 3 * h * ffn + 2 * h  # + gate/up/down + two RMSNorms
    total = embedding + L * per_layer + h  # + final norm
    assert total == 1_720_574_976
    assert model.total_params == total
    body = 2 * (total - embedding)  # 2.819 GFLOP: the facts table's figure
    assert body / 1e9 == pytest.approx(2.8, abs=0.05)
    assert model.body_flops_per_token == body
    lm_head = 2 * vocab * h
    assert model.lm_head_flops == lm_head
    assert model.linear_flops_per_token == body + lm_head  # 3.441 GFLOP


def test_llama_3_1_8b_param_count_by_hand():
    # 8,030,261,248 is the published parameter count of Llama-3.1-8B (untied embeddings).
    L, h, nh, nkv, hd, ffn, vocab = 32, 4096, 32, 8, 128, 14336, 128_256
    per_layer = 2 * h * nh * hd + 2 * h * nkv * hd + 3 * h * ffn + 2 * h
    total = 2 * vocab * h + L * per_layer + h
    assert total == 8_030_261_248
    model = MODELS["llama-3.1-8b"]
    assert model.total_params == total
    # Untied: body excludes both embedding and lm_head; lm_head counted per sampled token.
    assert model.body_flops_per_token == 2 * (total - 2 * vocab * h)
    assert model.linear_flops_per_token == 2 * (total - vocab * h)


# ---------------------------------------------------------------------------------------------
# (d) KV-head replication under tensor parallelism
# ---------------------------------------------------------------------------------------------


def test_qwen3_235b_kv_heads_replicated_at_tp8():
    model = MODELS["qwen3-235b-a22b"]
    # 4 KV heads over 8 cards: each card holds a whole head (replicated), not half of one.
    one_head = 2 * 94 * 1 * 128 * 2  # K and V, 94 layers, 1 head, head_dim 128, bf16
    assert model.kv_bytes_per_token("bf16", tp=8) == one_head
    assert model.kv_bytes_per_token("bf16", tp=8) != 192_512 / 8
    assert model.kv_bytes_per_token("bf16", tp=4) == one_head  # exactly one head per card
    assert model.kv_bytes_per_token("bf16", tp=2) == 2 * one_head
    assert model.kv_bytes_per_token("fp8", tp=8) == 2 * 94 * 1 * 128 * 1


def test_gqa_kv_splits_while_heads_last():
    model = MODELS["llama-3.1-8b"]  # 8 KV heads
    assert model.kv_bytes_per_token("bf16", tp=8) == 131_072 / 8
    assert model.kv_bytes_per_token("bf16", tp=16) == 131_072 / 8  # still one head per card


@pytest.mark.parametrize("tp", [1, 2, 8, 16])
def test_mla_kv_per_card_does_not_shrink_with_tp(tp):
    # MLA caches one latent per layer shared by all heads: every card holds all of it.
    assert MODELS["deepseek-r1"].kv_bytes_per_token("bf16", tp=tp) == 61 * (512 + 64) * 2


# ---------------------------------------------------------------------------------------------
# (e) weight bytes read by an MoE forward pass
# ---------------------------------------------------------------------------------------------


def _qwen3_235b_params_by_hand():
    L, h, nh, nkv, hd, vocab = 94, 4096, 64, 4, 128, 151_936
    experts, k, expert_ffn = 128, 8, 1536
    attention = 2 * h * nh * hd + 2 * h * nkv * hd + 2 * hd
    router = h * experts
    non_expert = 2 * vocab * h + h + L * (attention + 2 * h + router)
    expert = 3 * h * expert_ffn
    return non_expert, expert, L, experts, k


def test_qwen3_235b_params_by_hand():
    non_expert, expert, L, experts, k = _qwen3_235b_params_by_hand()
    model = MODELS["qwen3-235b-a22b"]
    assert model.total_params == non_expert + L * experts * expert
    assert model.active_params == non_expert + L * k * expert


def test_moe_one_token_reads_non_expert_plus_k_experts():
    non_expert, expert, L, experts, k = _qwen3_235b_params_by_hand()
    model = MODELS["qwen3-235b-a22b"]
    embedding = 151_936 * 4096  # looked up, not read in full
    expected = (non_expert - embedding + L * k * expert) * 2  # bf16
    assert model.weight_bytes_read(1, "bf16") == pytest.approx(expected, rel=1e-12)
    # fp8 halves it
    assert model.weight_bytes_read(1, "fp8") == pytest.approx(expected / 2, rel=1e-12)


def test_deepseek_one_token_reads_active_params_less_the_embedding_table():
    # 3 dense layers + 58 MoE layers with 1 shared + 8 routed experts: one token reads the
    # "37.5 B active" weights, except the input embedding table, which is only looked up.
    model = MODELS["deepseek-r1"]
    embedding = 129_280 * 7168
    assert model.weight_bytes_read(1, "fp8") == pytest.approx(model.active_params - embedding, rel=1e-12)


@pytest.mark.parametrize("name", ["qwen3-235b-a22b", "deepseek-r1"])
def test_moe_weight_bytes_grow_with_tokens_towards_total(name):
    model = MODELS[name]
    total = model.weight_bytes("bf16")
    counts = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    reads = [model.weight_bytes_read(n, "bf16") for n in counts]
    total -= model.embedding_params * 2  # the embedding table is looked up, never read whole
    # Strictly more distinct experts while far from saturation.
    assert all(b > a for a, b in zip(reads, reads[1:])), reads
    assert all(r <= total * (1 + 1e-12) for r in reads)
    # A huge batch touches every expert of every layer.
    assert model.weight_bytes_read(100_000, "bf16") == pytest.approx(total, rel=1e-9)
    # ...and is still well short of that for a single token.
    assert reads[0] < 0.2 * total


@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen3-32b", "llama-2-7b"])
@pytest.mark.parametrize("tokens", [0, 1, 7, 4096])
def test_dense_models_always_read_all_weights_but_the_embedding_table(name, tokens):
    model = MODELS[name]
    untied_embedding = model.vocab_size * model.hidden_size
    assert model.weight_bytes_read(tokens, "bf16") == (model.total_params - untied_embedding) * 2


def test_tied_embedding_is_read_as_the_lm_head():
    model = MODELS["qwen3-1.7b"]  # tie_word_embeddings: the table is the output projection too
    assert model.weight_bytes_read(1, "bf16") == model.total_params * 2


# ---------------------------------------------------------------------------------------------
# (f) scenario overrides layered over the shipped catalog
# ---------------------------------------------------------------------------------------------


def _extend(text, catalog=ACCELERATORS):
    located = load_yaml(text, "x.yaml")
    return catalog.extended(located.data, located, ())


def test_extended_with_base_changes_one_field_and_keeps_the_rest():
    catalog = _extend("h20-slow: {base: h20, memory_bandwidth: 3 TB/s}\n")
    slow, h20 = catalog["h20-slow"], ACCELERATORS["h20"]
    assert slow.name == "h20-slow"
    assert slow.memory_bandwidth == 3e12
    assert slow.memory_bytes == h20.memory_bytes == 97_871 * 2**20
    assert slow.flops == h20.flops
    assert slow.efficiency == h20.efficiency
    assert slow.scale_up_bandwidth == h20.scale_up_bandwidth
    assert slow.host_link_bandwidth == h20.host_link_bandwidth
    assert slow.vendor == "NVIDIA"
    # The base entry and the shipped catalog are untouched.
    assert catalog["h20"].memory_bandwidth == 4e12
    assert "h20-slow" not in ACCELERATORS
    assert ACCELERATORS["h20"].memory_bandwidth == 4e12


def test_extended_merges_nested_fields():
    catalog = _extend("h20-tuned:\n  base: h20\n  efficiency: {memory: 0.5}\n")
    tuned = catalog["h20-tuned"]
    assert tuned.efficiency.memory == 0.5
    assert tuned.efficiency.compute == ACCELERATORS["h20"].efficiency.compute == 0.6


def test_extended_same_name_overrides_in_place():
    catalog = _extend("l20: {memory_bytes: 96 GB}\n")
    assert catalog["l20"].memory_bytes == 96e9
    assert catalog["l20"].memory_bandwidth == 864e9


def test_extended_node_can_point_at_new_accelerator_fields():
    catalog = _extend("h20-4x: {base: h20-8x, accelerators_per_node: 4}\n", NODES)
    assert catalog["h20-4x"].accelerators_per_node == 4
    assert catalog["h20-4x"].accelerator == "h20"


def test_unknown_base_names_file_line_and_name():
    text = "# scenario catalog overrides\nh20-slow:\n  base: h2O\n  memory_bandwidth: 3 TB/s\n"
    with pytest.raises(SpecError) as info:
        _extend(text)
    message = str(info.value)
    assert "x.yaml:3" in message  # the line of `base: h2O`
    assert "h2O" in message
    assert "h20" in message.replace("h2O", "")  # the known names are listed


def test_override_from_file_refuses_bare_numbers_and_names_line():
    # In a file a bare bandwidth is ambiguous (B/s? GB/s?), so it is refused, at its line.
    text = "h20-fast:\n  base: h20\n  memory_bandwidth: 5000\n"
    with pytest.raises(SpecError) as info:
        _extend(text)
    assert "x.yaml:3" in str(info.value)
    assert "memory_bandwidth" in str(info.value)


def test_override_unknown_field_names_line():
    text = "h20-typo:\n  base: h20\n  memory_bandwith: 3 TB/s\n"
    with pytest.raises(SpecError) as info:
        _extend(text)
    assert "x.yaml:3" in str(info.value)
    assert "memory_bandwith" in str(info.value)


def test_kimi_k2_is_a_trillion_parameter_moe_with_deepseek_v3_attention():
    from kvsim.models import model_catalog

    k2 = model_catalog()["kimi-k2"]
    # Moonshot publishes "1T total parameters, 32B activated" (model card); derived from config.json:
    assert 1.0e12 < k2.total_params < 1.05e12
    assert 32e9 < k2.active_params < 33.5e9
    # MLA latent: 61 layers x (512 + 64), one byte each in FP8 -- as DeepSeek-V3, whose attention it shares
    assert k2.kv_bytes_per_token("fp8") == 61 * 576 == model_catalog()["deepseek-r1"].kv_bytes_per_token("fp8")


def test_mxfp4_packs_a_shared_scale_per_32_elements():
    from kvsim.dtypes import DTYPE_BYTES

    assert DTYPE_BYTES["mxfp4"] * 32 == 16 + 1  # 32 four-bit elements + one 8-bit scale


def test_atlas_850_and_850e_carry_the_prefill_and_decode_parts():
    from kvsim.hardware import accelerator_catalog, node_catalog

    nodes, accs = node_catalog(), accelerator_catalog()
    assert nodes["atlas-850"].accelerator == "ascend-950pr" and nodes["atlas-850e"].accelerator == "ascend-950dt-850e"
    for name in ("atlas-850", "atlas-850e"):
        assert nodes[name].accelerators_per_node == 8
    assert "assumption" in nodes["atlas-850"].sources["accelerator"]
    assert "14.2 PFLOPS" in nodes["atlas-850e"].sources["accelerator"]
    for name in ("ascend-950pr", "ascend-950dt"):
        assert accs[name].scale_up_latency_s == pytest.approx(2.1e-6)
        assert accs[name].peak_flops("mxfp4") == 2 * accs[name].peak_flops("fp8")
    # the 850E's eight 950DT give 14.2 PFLOPS mxFP4 (issue 26): 1.775 a card, FP8 derated alike;
    # its SuperPoD's 3 us round trip per remote access; the memory the bare card's
    in_node, bare = accs["ascend-950dt-850e"], accs["ascend-950dt"]
    assert 8 * in_node.peak_flops("mxfp4") == pytest.approx(14.2e15)
    assert in_node.peak_flops("mxfp4") == 2 * in_node.peak_flops("fp8")
    assert in_node.scale_up_latency_s == pytest.approx(3e-6)
    assert (in_node.memory_bytes, in_node.memory_bandwidth) == (bare.memory_bytes, bare.memory_bandwidth)
