"""Every part of the shipped catalog has a dated price and a power figure, each with a source or
marked as an assumption; the figures the sources quote are the figures the catalog holds.

Reference figures are typed in from ../shared/reference/hardware_facts.md (section 4) and the
derivations in the catalog headers, not read back from kvsim.
"""

import re

import pytest

from kvsim.hardware import accelerator_catalog, node_catalog, pool_node_catalog
from kvsim.hardware.specs import NodeSpec
from kvsim.yaml_io import SpecError, load_yaml

ACCELERATORS = accelerator_catalog()
NODES = node_catalog()
POOL_NODES = pool_node_catalog()

# A confidence tag as the catalog writes them: "(H)", "(M/H)", "..., M)", "..., L;"
_TAG = re.compile(r"(^|[\s(,/])[HML](/[HML])?[),;]")
CNY_PER_USD = 7.2
NON_CARD_SHARE_USD = 44_400  # nodes.yaml header: 1.2 M CNY - 8 x 110,000 CNY, at 7.2 CNY/USD

PARTS = ([("accelerator", n, ACCELERATORS) for n in ACCELERATORS.names()]
         + [("node", n, NODES) for n in NODES.names()]
         + [("pool node", n, POOL_NODES) for n in POOL_NODES.names()])
POWER_FIELD = {"accelerator": "tdp_w", "node": "host_power_w", "pool node": "power_w"}


def figure_problems(raw: dict, field: str) -> list[str]:
    """What is wrong with the figure ``field`` of a raw catalog entry: missing, or with a source
    that neither carries a confidence tag nor says it is an ASSUMPTION."""
    if raw.get(field) is None:
        return [f"{field} missing"]
    text = raw.get("sources", {}).get(field, "")
    if not text.strip():
        return [f"{field} has no source"]
    if not _TAG.search(text) and "ASSUMPTION" not in text:
        return [f"{field}: source has no confidence tag and is not marked ASSUMPTION"]
    return []


def price_problems(raw: dict) -> list[str]:
    problems = figure_problems(raw, "price_usd")
    if raw.get("price_usd") is not None and raw.get("price_date") is None:
        problems.append("price_date missing")
    return problems


@pytest.mark.parametrize("family, name, catalog", PARTS, ids=[f"{f}:{n}" for f, n, _ in PARTS])
def test_every_part_has_a_dated_sourced_price(family, name, catalog):
    assert not price_problems(catalog.raw[name]), (family, name)
    assert catalog[name].price_usd > 0 and catalog[name].price_date


@pytest.mark.parametrize("family, name, catalog", PARTS, ids=[f"{f}:{n}" for f, n, _ in PARTS])
def test_every_part_has_a_sourced_power_figure(family, name, catalog):
    assert not figure_problems(catalog.raw[name], POWER_FIELD[family]), (family, name)


def test_price_rule_can_fail():
    # A null price, an untagged unmarked source, a price with no date: each is caught.
    assert price_problems({"price_usd": None, "sources": {}}) == ["price_usd missing"]
    assert price_problems({"price_usd": 5, "price_date": "2024", "sources": {"price_usd": "a blog"}}) == [
        "price_usd: source has no confidence tag and is not marked ASSUMPTION"]
    assert price_problems({"price_usd": 5, "sources": {"price_usd": "Reuters (M)"}}) == ["price_date missing"]
    assert price_problems({"price_usd": 5, "price_date": "2024", "sources": {"price_usd": "ASSUMPTION: x"}}) == []
    assert figure_problems({"tdp_w": "1 W", "sources": {}}, "tdp_w") == ["tdp_w has no source"]


@pytest.mark.parametrize("name, cny, date", [("h20-8x", 1.2e6, "2024-Q2"), ("h100-8x", 2.7e6, "2024-Q2"),
                                             ("h200-8x", 1.4e6, "2025-Q4")])
def test_server_prices_quoted_in_yuan_match_the_facts(name, cny, date):
    # hardware_facts.md section 4: H20 server ~1.2 M CNY mid 2024, H100 8-card 2.7 M CNY mid 2024,
    # H200 8-card module 1.4 M CNY late 2025.
    assert NODES[name].price_usd == pytest.approx(cny / CNY_PER_USD, abs=100)
    assert NODES[name].price_date == date


def test_card_prices_match_the_facts():
    assert ACCELERATORS["h20"].price_usd == (12_000 + 15_000) / 2  # [REU] USD 12,000-15,000, early 2024
    assert ACCELERATORS["h200-sxm"].price_usd == 32_000  # HF MSRP
    # Ascend 950: assumed at the 910B's 120,000 CNY
    assert ACCELERATORS["ascend-950pr"].price_usd == pytest.approx(120_000 / CNY_PER_USD, abs=50)


def test_non_card_share_is_the_h20_server_less_its_cards():
    # 1.2 M CNY server - 8 x 110,000 CNY cards (distributor price, [REU]) = 320,000 CNY
    assert (1.2e6 - 8 * 110_000) / CNY_PER_USD == pytest.approx(NON_CARD_SHARE_USD, abs=50)


@pytest.mark.parametrize("node", ["l20-8x", "l40s-8x", "rtx-4090-8x", "ascend-950pr-8x", "ascend-950dt-8x",
                                  "atlas-850", "atlas-850e"])
def test_assumed_server_prices_are_eight_cards_plus_the_non_card_share(node):
    spec = NODES[node]
    card = ACCELERATORS[spec.accelerator]
    assert spec.price_usd == pytest.approx(spec.accelerators_per_node * card.price_usd + NON_CARD_SHARE_USD, abs=50)
    assert "ASSUMPTION" in spec.sources["price_usd"]


def test_l20_is_assumed_at_the_l40s_price_and_says_so():
    l20, l40s = ACCELERATORS["l20"], ACCELERATORS["l40s"]
    assert l20.price_usd == l40s.price_usd == 7_500
    assert "ASSUMPTION" in l20.sources["price_usd"] and "UNCONFIRMED" in l20.sources["price_usd"]


def test_pool_node_prices_are_media_plus_platform():
    # 16 x 14 TiB drives at USD 185 per (decimal) TB, + USD 20,000 platform
    nvme = 16 * 14 * 2**40 / 1e12 * 185 + 20_000
    assert POOL_NODES["nvme-storage-16x"].price_usd == pytest.approx(nvme, abs=100)
    # 32 x 128 GiB RDIMMs at USD 2,400 each, + USD 20,000 platform
    assert POOL_NODES["dram-pool-8x"].capacity_bytes == 32 * 128 * 2**30
    assert POOL_NODES["dram-pool-8x"].price_usd == 32 * 2_400 + 20_000


def _node(text: str):
    located = load_yaml(text, "x.yaml")
    return NODES.extended(located.data, located, ())


def test_a_price_needs_a_date_and_a_date_must_read_as_one():
    with pytest.raises(SpecError) as info:
        _node("cheap:\n  base: h20-8x\n  price_date: null\n")
    assert "price_date" in str(info.value)
    with pytest.raises(SpecError) as info:
        _node("cheap:\n  base: h20-8x\n  price_date: early 2024\n")
    assert "x.yaml:3" in str(info.value) and "2024-Q1" in str(info.value)
    with pytest.raises(SpecError):
        _node("cheap:\n  base: h20-8x\n  price_usd: -1\n")


@pytest.mark.parametrize("written, stored", [("2024", "2024"), ("2024-06", "2024-06"), ("2024-06-30", "2024-06-30"),
                                             ("2025-Q4", "2025-Q4"), ("2026-H1", "2026-H1")])
def test_price_dates_as_yaml_reads_them(written, stored):
    # YAML reads a bare year as an int and a full date as a date; both are kept as text.
    assert _node(f"n:\n  base: h20-8x\n  price_date: {written}\n")["n"].price_date == stored


def test_scenario_may_override_a_price_and_leave_it_unknown():
    catalog = _node("l20-quote:\n  base: l20-8x\n  price_usd: 90000\n  price_date: 2026-Q3\n"
                    "unpriced:\n  base: l20-8x\n  price_usd: null\n  price_date: null\n")
    assert catalog["l20-quote"].price_usd == 90_000 and catalog["l20-quote"].price_date == "2026-Q3"
    assert catalog["unpriced"].price_usd is None
    assert isinstance(catalog["unpriced"], NodeSpec)
