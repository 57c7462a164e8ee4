"""MedCounterfact builder: label filter, intervention extraction, substitution, determinism, validity."""

import json

import pytest

from eval_hooks import DataError, load_rows
from eval_hooks.__main__ import main
from eval_hooks.builders.medcounterfact import TERMS, build_items, extract_intervention, substitute

REC = {"question_id": 11, "answer": "lower", "relevant_sources": ["1"], "medical_specialty": "Neurology",
       "question": "Is relapse rate higher, lower, or the same when comparing Interferon Beta (IFN-B) to placebo?",
       "sources": {"1": {"content": "Interferon beta reduced relapses vs placebo. IFN-B was well tolerated; "
                                    "IFN-Bx is another drug. Interferon betas were stable."},
                   "2": {"content": "unrelated"}}}


@pytest.mark.parametrize("q, expected", [
    ("Is X higher, lower, or the same when comparing aspirin to placebo?", ("aspirin", "placebo")),
    ("Is X higher when comparing drug A with drug B?", ("drug A", "drug B")),
    ("Is X higher when comparing  systemic antibiotics and placebo?", ("systemic antibiotics", "placebo")),
    ("Is X higher when comparing following exercise training and control? ", ("exercise training", "control")),
    ("Is X higher or lower?", None),
])
def test_extract_intervention(q, expected):
    assert extract_intervention(q) == expected


def test_substitute_every_form_but_not_inside_words():
    text = REC["sources"]["1"]["content"]
    out, n = substitute(text, "Interferon Beta (IFN-B)", "flumbrotil")
    # "Interferon beta" (case-insensitive), "IFN-B" (abbreviation), "Interferon betas" -> singular form
    # is not a whole-word match of the plural, so that one stays; "IFN-Bx" is another word and stays
    assert out == ("flumbrotil reduced relapses vs placebo. flumbrotil was well tolerated; "
                   "IFN-Bx is another drug. Interferon betas were stable.")
    assert n == 2


def test_build_items_by_hand():
    recs = [(1, REC), (2, {**REC, "question_id": 12, "answer": "uncertain effect"})]
    items, stats = build_items(recs, seed=0)
    assert stats["questions"] == 1 and stats["dropped_label"] == 1 and len(items) == 5
    by = {it["category"]: it for it in items}
    assert by["original"]["question"] == REC["question"] and by["original"]["evidence"] == [REC["sources"]["1"]["content"]]
    for cat in ("nonce", "medical", "non_medical", "toxic"):
        it = by[cat]
        assert it["term_substituted"] in TERMS[cat] and it["label"] == "Lower" and it["category"] == cat
        assert it["term_substituted"] in it["question"] and "Interferon" not in it["question"]
        assert it["evidence_substitutions"] == 2 and it["item_id"] == f"med-11-{cat}"
    assert build_items(recs, seed=0)[0] == items
    assert any(build_items(recs, seed=s)[0] != items for s in range(1, 6))


def test_bad_record():
    with pytest.raises(DataError, match="no evidence") as ei:
        build_items([(3, {**REC, "sources": {}, "relevant_sources": []})], path="m.jsonl")
    assert ei.value.line == 3


def test_real_medevidence(shared_dir, tmp_path, capsys):
    out = tmp_path / "med.jsonl"
    src = shared_dir / "data" / "external" / "medevidence_abstract.jsonl"
    assert main(["build-medcounterfact", "--data", str(src), "--out", str(out)]) == 0
    stats = json.loads(capsys.readouterr().out)
    # docs/medcounterfact.md#reference-numbers: 203 questions kept (Higher 26.1%, No Difference 46.3%, Lower 27.6%)
    assert stats["questions"] == 203 and stats["items"] == 5 * 203
    assert (stats["label_Higher"], stats["label_No Difference"], stats["label_Lower"]) == (53, 94, 56)
    rows = load_rows("med", out)
    assert len(rows) == 4 * 5 * 203
