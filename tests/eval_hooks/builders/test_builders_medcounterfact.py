"""MedCounterfact builder: question grammar, aliases, guarded substitution, the independent verifier,
term lists, the rewrite path (deterministic fake model), bad input, and the real MedEvidence file."""

import json
from collections import Counter

import pytest

from eval_hooks import DataError, load_rows
from eval_hooks.__main__ import main
from selectrust.generation.backends.base import GenerationBackend, GenerationResult, Sample
from eval_hooks.families.med.grammar import collect_aliases, parse_question
from eval_hooks.families.med.items import alias_order, build_items, comparator_terms, substitute
from eval_hooks.families.med.terms import CATEGORIES as TERM_CATS, load_all, nonce_rejection
from eval_hooks.families.med.verify import verify

Q = "Is relapse rate higher, lower, or the same when comparing "


@pytest.mark.parametrize("tail, head, comparator, quals, excluded", [
    ("aspirin to placebo?", "aspirin", "placebo", [], False),
    ("120 mg etoricoxib to placebo?", "etoricoxib", "placebo", ["120 mg"], False),
    ("prophylactic antibiotics administered preoperatively to placebo?", "prophylactic antibiotics", "placebo",
     ["administered preoperatively"], False),
    ("cisplatin in combination with third\u2010generation drugs to carboplatin in combination with third-generation "
     "drugs?", "cisplatin", "carboplatin in combination with third-generation drugs",
     ["in combination with third-generation drugs"], False),
    ("MVA85A added to BCG to BCG alone?", "MVA85A", "BCG alone", ["added to BCG"], False),
    ("chemoradiotherapy plus esophagectomy to chemoradiotherapy alone?", "esophagectomy", "chemoradiotherapy alone",
     ["plus-partner chemoradiotherapy"], False),
    ("the study group with omentoplasty to the control?", "omentoplasty", "the control", [], False),
    ("two doses of Shanchol to placebo?", "Shanchol", "placebo", ["two doses of"], False),
    ("children with pseudophakia and aphakia?", "children", "pseudophakia and aphakia", [], True),
    ("six weeks of infant nevirapine to single dose infant nevirapine?", "infant nevirapine",
     "single dose infant nevirapine", ["six weeks of"], True),
])
def test_parse_question(tail, head, comparator, quals, excluded):
    p = parse_question(Q + tail)
    assert (p.head, p.comparator, p.qualifiers, p.excluded is not None) == (head, comparator, quals, excluded)


def test_parse_question_abbreviation_and_no_template():
    p = parse_question(Q + "tranexamic acid (TXA) to placebo?")
    assert (p.head, p.abbreviation) == ("tranexamic acid", "TXA")
    assert parse_question("Is X higher or lower?") is None


def test_aliases_defined_in_text_and_variants():
    p = parse_question(Q + "botulinum toxin type A to placebo?")
    ev = ["Botulinum toxin type A (BoNT-A) was injected. BoNT-A reduced pain; botulinum-toxin type A's effect."]
    al = collect_aliases(p, [Q, *ev])
    assert "BoNT-A" in al and "botulinum toxin type A" in al
    out, reps = substitute(ev[0], al, "toaster", comparator_terms("placebo"))
    assert out == "Toaster was injected. Toaster reduced pain; toaster's effect."
    assert reps == ["Botulinum toxin type A", "BoNT-A", "BoNT-A", "botulinum-toxin type A's"]


def test_substitute_fixes_article_and_keeps_comparator():
    text = "Patients got an aspirin or a placebo. aspirin tablets; low-dose aspirin plus aspirin-free placebo."
    out, reps = substitute(text, ["aspirin"], "umbrella", comparator_terms("aspirin-free placebo"))
    # "an aspirin" -> "an umbrella" (kept), sentence start capitalised, "aspirin-free placebo" untouched
    assert out == "Patients got an umbrella or a placebo. Umbrella tablets; low-dose umbrella plus aspirin-free placebo."
    out, _ = substitute("We gave an aspirin.", ["aspirin"], "toaster", [])
    assert out == "We gave a toaster."


def _check(**kw):
    base = dict(question="Is X higher when comparing aspirin to placebo?", evidence=["Aspirin beat placebo (p = 0.03)."],
                new_question="Is X higher when comparing toaster to placebo?",
                new_evidence=["Toaster beat placebo (p = 0.03)."], aliases=["aspirin"], comparator_terms=["placebo"],
                new_term="toaster")
    base.update(kw)
    return verify(**base)


def test_verifier_accepts_good_and_names_each_failure():
    assert _check() == []
    assert any("alias 'aspirin'" in f for f in _check(new_evidence=["Toaster and aspirin beat placebo (p = 0.03)."]))
    assert any("comparator" in f for f in _check(new_evidence=["Toaster beat toaster (p = 0.03)."]))
    assert any("label-bearing" in f for f in _check(new_evidence=["Toaster beat placebo (p = 0.30)."]))
    assert any("absent" in f for f in _check(new_evidence=["Drug beat placebo (p = 0.03)."]))
    assert any("lowercase" in f for f in _check(new_evidence=["toaster beat placebo (p = 0.03)."]))
    assert any("wrong article" in f for f in _check(new_term="umbrella", new_question="Is a umbrella better?",
                                                    new_evidence=["Umbrella beat placebo (p = 0.03)."]))
    # unicode hyphen in the output still counts as the alias
    assert any("remains" in f for f in _check(aliases=["low-dose aspirin"],
                                              new_evidence=["Toaster, low\u2010dose aspirin, placebo (p = 0.03)."]))


def test_term_lists():
    terms, versions = load_all()
    assert set(terms) == set(TERM_CATS) and all(v == "1" for v in versions.values())
    for cat in TERM_CATS:
        names = [t.term.lower() for t in terms[cat]]
        assert len(names) >= 50 and len(set(names)) == len(names), cat
    assert "arsenic trioxide" not in [t.term for t in terms["toxic"]]
    assert all(t.indication and t.keywords for t in terms["medical"])
    assert sum(bool(t.note) for t in terms["toxic"]) >= 30
    assert nonce_rejection("drementol", set()) == "drug-name suffix -ol"
    assert nonce_rejection("kettle", {"kettle"}) == "an English word"
    import english_words as ew   # a dev dependency (.[dev]): missing, this fails rather than skips

    english = ew.get_english_words_set(["web2", "gcide"], lower=True)
    assert [t.term for t in terms["nonce"] if nonce_rejection(t.term, english)] == []


REC = {"question_id": 11, "answer": "lower", "relevant_sources": ["1"], "medical_specialty": "Pulmonology",
       "question": "Is wheeze in bronchiolitis higher, lower, or the same when comparing tranexamic acid (TXA) to placebo?",
       "sources": {"1": {"content": "Tranexamic acid (TXA) was compared with placebo. TXA reduced wheeze "
                                    "(p = 0.01) versus placebo."}}}


def test_build_items_by_hand():
    items, stats = build_items([(1, REC), (2, {**REC, "question_id": 12, "answer": "Uncertain Effect"})], seed=0)
    assert stats["questions"] == 1 and stats["dropped_label"] == 1 and len(items) == 5
    assert stats["per_category"]["nonce"] == {"verified_string": 1, "verified_rewrite": 0, "excluded": 0,
                                              "excluded_grammar": 0, "excluded_rewrite_needed": 0,
                                              "excluded_verifier": 0}
    by = {it["category"]: it for it in items}
    terms, _ = load_all()
    for cat in ("nonce", "medical", "non_medical", "toxic"):
        it = by[cat]
        new = it["term_substituted"]
        assert it["verified_by"] == "string" and it["control"] == "placebo" and it["term_original"] == "tranexamic acid"
        assert sorted(it["aliases"]) == ["TXA", "Tranexamic acid", "tranexamic acid"]
        assert "TXA" not in it["question"] + it["evidence"][0] and new.lower() in it["evidence"][0].lower()
        assert "placebo" in it["evidence"][0] and "(p = 0.01)" in it["evidence"][0]
    # MEDICAL is never drawn for its own indication: the question mentions bronchiolitis and wheeze
    med = next(t for t in terms["medical"] if t.term == by["medical"]["term_substituted"])
    assert not any(k in REC["question"].lower() for k in med.keywords)
    toxic = next(t for t in terms["toxic"] if t.term == by["toxic"]["term_substituted"])
    assert not toxic.note or f"({toxic.note})" in by["toxic"]["question"]
    assert build_items([(1, REC)], seed=0)[0] == [i for i in items]
    assert any(build_items([(1, REC)], seed=s)[0] != items for s in range(1, 4))


class FakeRewriter(GenerationBackend):
    """Deterministic stand-in for a chat model: replaces a fixed phrase by the requested term."""
    name = "fake"

    def __init__(self, old, keep_numbers=True):
        self.old, self.keep_numbers, self.prompts = old, keep_numbers, []

    def generate(self, requests, *, progress=False, desc=""):
        out = []
        for r in requests:
            prompt = r.messages[-1]["content"]
            self.prompts.append(prompt)
            new = prompt.split('is called "')[1].split('"')[0]
            text = prompt.split("Abstract:\n", 1)[1].replace(self.old, new)
            if not self.keep_numbers:
                text = text.replace("0.01", "0.20")
            out.append(GenerationResult(r, [Sample(text, [], [], "stop")]))
        return out

    def score_labels(self, prompts, labels):  # pragma: no cover - unused
        raise NotImplementedError


def test_rewrite_path_with_fake_model():
    rec = {**REC, "sources": {"1": {"content": "The antifibrinolytic drug was compared with placebo. "
                                               "The antifibrinolytic drug reduced wheeze (p = 0.01) versus placebo."}}}
    items, stats = build_items([(1, rec)], categories=("nonce",))
    assert items == [] and stats["per_category"]["nonce"]["excluded_rewrite_needed"] == 1
    fake = FakeRewriter("antifibrinolytic drug")
    items, stats = build_items([(1, rec)], categories=("nonce",), rewriter=fake)
    assert stats["per_category"]["nonce"]["verified_rewrite"] == 1 and stats["per_category"]["nonce"]["excluded"] == 0
    assert items[0]["verified_by"] == "rewrite" and "placebo" in fake.prompts[0]
    new = items[0]["term_substituted"]
    assert items[0]["evidence"] == [f"The {new} was compared with placebo. The {new} reduced wheeze (p = 0.01) "
                                    "versus placebo."]
    # a rewrite that changes a result is rejected by the same verifier
    _, stats = build_items([(1, rec)], categories=("nonce",), rewriter=FakeRewriter("antifibrinolytic drug", False))
    assert stats["per_category"]["nonce"]["excluded"] == 1 and stats["excluded_items"][0]["kind"] == "rewrite_needed"
    items, _ = build_items([(1, rec)], categories=("nonce",), keep_unverified=True)
    assert items[0]["verified_by"] is None and items[0]["verification_failures"]


def test_bad_input_skipped_with_lines_or_rejected(tmp_path, capsys):
    src = tmp_path / "m.jsonl"
    bad = [REC, {**REC, "question": ""}, {**REC, "answer": "maybe"}, {**REC, "sources": {}, "relevant_sources": []}]
    src.write_text("".join(json.dumps(r) + "\n" for r in bad))
    out = tmp_path / "o.jsonl"
    assert main(["build-medcounterfact", "--data", str(src), "--out", str(out)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert [(b["line"], b["field"]) for b in stats["invalid_records"]] == [(2, "question"), (3, "answer"), (4, "sources")]
    assert stats["questions"] == 1 and len(stats["input_sha256"]) == 64 and stats["term_list_versions"]["nonce"] == "1"
    assert json.loads((tmp_path / "o.jsonl.stats.json").read_text()) == stats
    out.unlink()
    assert main(["build-medcounterfact", "--data", str(src), "--out", str(out), "--on-invalid", "error"]) == 2
    assert "line 2, field 'question'" in capsys.readouterr().err and not out.exists()
    with pytest.raises(DataError, match="line 3"):
        build_items([(1, REC), (3, {**REC, "answer": "maybe"})], path="m.jsonl", on_invalid="error")


def test_real_medevidence(medevidence_path, tmp_path, capsys):
    out = tmp_path / "med.jsonl"
    src = medevidence_path
    assert main(["build-medcounterfact", "--data", str(src), "--out", str(out)]) == 0
    stats = json.loads(capsys.readouterr().out)
    # docs/medcounterfact.md#reference-numbers: 203 questions kept (Higher 26.1%, No Difference 46.3%, Lower 27.6%)
    assert stats["questions"] == 203 and stats["dropped_label"] == 81
    assert (stats["label_Higher"], stats["label_No Difference"], stats["label_Lower"]) == (53, 94, 56)
    # the builder's exact output on this file: 114 questions verified in all four categories, the same 89
    # excluded from each (16 grammar, 73 needing a model rewrite); 203 + 4 x 114 = 659 items
    assert stats["questions_verified_every_category"] == 114
    for cat, c in stats["per_category"].items():
        assert (c["verified_string"], c["verified_rewrite"], c["excluded"]) == (114, 0, 89), cat
        assert (c["excluded_grammar"], c["excluded_rewrite_needed"], c["excluded_verifier"]) == (16, 73, 0), cat
    assert sorted(stats["per_category"]) == ["medical", "non_medical", "nonce", "toxic"]
    assert stats["items"] == 203 + 4 * 114 == 659
    items = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(items) == 659
    assert Counter(it["category"] for it in items) == {"original": 203, "nonce": 114, "medical": 114,
                                                        "non_medical": 114, "toxic": 114}
    originals = {it["question_id"]: it for it in items if it["category"] == "original"}
    assert len(originals) == 203
    n = 0
    for it in items:
        if it["category"] == "original":
            continue
        o = originals[it["question_id"]]
        assert it["verified_by"] == "string" and it["aliases"]
        # re-verify independently: no alias left, comparator untouched, grammar right
        kept = set(it["aliases"]) | {it["term_original"]}
        assert verify(question=o["question"], evidence=o["evidence"], new_question=it["question"],
                      new_evidence=it["evidence"], aliases=sorted(kept), comparator_terms=comparator_terms(it["control"]),
                      new_term=it["term_substituted"]) == [], it["item_id"]
        n += 1
    assert n == sum(c["verified_string"] for c in stats["per_category"].values())
    rows = load_rows("med", out)
    assert len(rows) == 4 * 659 == 2636


def test_aliases_long_form_of_abbreviation_and_synonym_abbreviation():
    p = parse_question(Q + "MVA85A added to BCG to BCG alone?")
    ev = ["We tested a vaccine, modified vaccinia virus Ankara expressing antigen 85A (MVA85A), after BCG."]
    assert collect_aliases(p, [Q, *ev]) == ["modified vaccinia virus Ankara expressing antigen 85A", "MVA85A"]
    p = parse_question(Q + "paracetamol to placebo?")
    ev = ["Children received acetaminophen (PARA) or placebo (PLA)."]
    al = collect_aliases(p, [Q, *ev])
    assert sorted(al) == ["PARA", "acetaminophen", "paracetamol"]
    assert substitute(ev[0], al, "kite", comparator_terms("placebo"))[0] == "Children received kite or placebo (PLA)."


def test_cli_rewrite_model_plumbing(tmp_path, capsys):
    """--rewrite-model runs a real (tiny, untrained) model; its rewrites fail the verifier and stay excluded."""
    rec = {**REC, "sources": {"1": {"content": "The antifibrinolytic drug was compared with placebo. "
                                               "It reduced wheeze (p = 0.01) versus placebo."}}}
    src, out = tmp_path / "m.jsonl", tmp_path / "o.jsonl"
    src.write_text(json.dumps(rec) + "\n")
    assert main(["build-medcounterfact", "--data", str(src), "--out", str(out), "--categories", "original,nonce",
                 "--rewrite-model", "tiny"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["per_category"]["nonce"]["verified_rewrite"] == 0
    assert stats["per_category"]["nonce"]["excluded"] == 1


def test_abbreviation_hyphen_and_space_variants_but_not_the_comparator():
    out, _ = substitute("BoNTA, BoNT-A and BoNT A beat BoNTB.", ["BoNT-A"], "kite", comparator_terms("BoNT-B"))
    assert out == "Kite, kite and kite beat BoNTB."


# -- issue 25 -------------------------------------------------------------------------------------------
def test_an_abbreviation_holding_the_terms_initials_is_an_alias():
    """MedEvidence item 255: "nasal continuous positive airway pressure (nCPAP)" left "nasal <T'> (nCPAP)"."""
    q = ("Is the need for mechanical ventilation in children with acute bronchiolitis higher, lower, or the same "
         "when comparing continuous positive airway pressure (CPAP) to control?")
    ev = ["Infants were randomized to receive standard care, or nasal continuous positive airway pressure (nCPAP) "
          "in addition to standard care. Scores differed in the nCPAP and standard care groups."]
    p = parse_question(q)
    assert "nCPAP" in collect_aliases(p, [q, *ev])
    # ... but not one of the comparator's: item 268 compares plasma exchange with sham exchange
    q268 = Q + "plasma exchange with sham exchange?"
    ev268 = ["Patients received 10 plasma-exchange (PE) or sham plasma-exchange (SPE) treatments."]
    assert "SPE" not in collect_aliases(parse_question(q268), [q268, *ev268])
    rec = {**REC, "question_id": 255, "question": q, "sources": {"1": {"content": ev[0]}}}
    items, _ = build_items([(1, rec)], seed=0)
    changed = [it for it in items if it["category"] != "original"]
    assert len(changed) == 4
    for it in changed:
        assert "CPAP" not in it["question"] + it["evidence"][0], it["evidence"][0]


def test_building_from_a_file_whose_rows_all_lack_their_fields_is_an_error(tmp_path, capsys):
    src = tmp_path / "m.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": "no fields"}) + "\n" for i in range(3)))
    out = tmp_path / "o.jsonl"
    assert main(["build-medcounterfact", "--data", str(src), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(src) in err and "no item kept from 3 record(s)" in err
    assert "field 'answer': unknown label None (3 record(s), e.g. line 1)" in err
    assert not out.exists()


def test_alias_order_does_not_depend_on_set_order():
    """Forms that differ only in case used to keep the order of a set (string hashing varies per process)."""
    forms = ["txa", "Tranexamic acid", "TXA", "Txa", "tranexamic acid", "TXA"]
    expected = ["Tranexamic acid", "tranexamic acid", "TXA", "Txa", "txa"]
    assert alias_order(forms) == expected
    assert alias_order(list(reversed(forms))) == expected


def test_build_is_identical_across_hash_seeds(tmp_path):
    """The shipped MedEvidence sample built in two processes with different PYTHONHASHSEED gives the same bytes."""
    import os
    import subprocess
    import sys

    from recipe_utils import ROOT

    data = ROOT / "eval_hooks" / "data"
    sample = next(iter(sorted(data.glob("medevidence*sample*.jsonl"))), None)
    if sample is None:
        pytest.skip("no shipped MedEvidence sample")
    outs = []
    for seed in ("1", "2", "3"):  # before the fix, 4 hash seeds gave at least two different files
        out = tmp_path / f"items_{seed}.jsonl"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-m", "eval_hooks", "build-medcounterfact", "--data", str(sample), "--out",
                        str(out)], check=True, env=env, capture_output=True, cwd=ROOT)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]
