"""The knowledge estimate's quality report: ROC AUC and the calibration table on hand-worked examples, the labels
from scores, the answer probability of a sample, knowledge.jsonl round trip, and the report from a knowledge file
and an evaluation's item_scores.jsonl."""

import json
import math

import pytest
from omegaconf import OmegaConf

from selectrust.generation.backends.base import GenerationResult, Sample
from selectrust.core.io import DataError, write_jsonl_atomic
from eval_hooks.knowledge import (answer_prob, classify, estimate_knowledge, greedy_prob_score, knowledge_quality,
                                  knowledge_record, load_knowledge, read_estimates)
from eval_hooks.metrics.calibration import calibration_table, expected_calibration_error, roc_auc
from mining_fakes import rows_for
from selectrust.core.errors import ConfigError
from trainer.config import KnowledgeConfig, validate_knowledge


# -- ROC AUC -----------------------------------------------------------------------------------------

def test_auc_counts_ordered_pairs():
    # positives {0.35, 0.8}, negatives {0.1, 0.4}: of the 4 (pos, neg) pairs 0.35 > 0.1, 0.8 > 0.1, 0.8 > 0.4
    # are ordered and 0.35 < 0.4 is not -> 3/4
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [1, 1, 0, 0]) == pytest.approx(0.25)  # the same score, reversed outcome
    assert roc_auc([1, 2, 3, 4], [False, False, True, True]) == 1.0


def test_auc_ties_count_one_half():
    # positives {0.5, 1.0}, negatives {0.5, 0.5}: 1.0 beats both (2), 0.5 ties both (2 x 1/2) -> 3/4
    assert roc_auc([0.5, 0.5, 0.5, 1.0], [1, 0, 0, 1]) == pytest.approx(0.75)
    # a k=4 accuracy score: pos {1, 1, .75}, neg {.75, .25}: 1 > both (2 + 2), .75 > .25 and ties .75 -> 5.5 / 6
    assert roc_auc([1.0, 1.0, 0.75, 0.75, 0.25], [1, 1, 1, 0, 0]) == pytest.approx(5.5 / 6)
    assert roc_auc([0.3] * 5, [1, 0, 1, 0, 0]) == 0.5  # a constant score is chance


def test_auc_undefined_with_one_outcome_and_bad_input_refused():
    assert roc_auc([0.1, 0.9], [1, 1]) is None
    assert roc_auc([], []) is None
    with pytest.raises(ValueError, match="same length"):
        roc_auc([0.1, 0.2], [1])
    with pytest.raises(ValueError, match="finite"):
        roc_auc([0.1, float("nan")], [1, 0])
    with pytest.raises(ValueError, match="true/false"):
        roc_auc([0.1, 0.2], [1, 2])


# -- calibration ----------------------------------------------------------------------------------------

def test_calibration_table_bins_and_ece():
    scores = [0.0, 0.1, 0.25, 0.5, 0.75, 1.0, 1.0]
    outcomes = [0, 0, 1, 0, 1, 1, 0]
    tab = calibration_table(scores, outcomes, n_bins=4)
    assert [(b["lo"], b["hi"]) for b in tab] == [(0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0)]
    # [0, .25): 0, .1 | [.25, .5): .25 | [.5, .75): .5 | [.75, 1]: .75, 1, 1 (a bound belongs to the bin it opens)
    assert [b["count"] for b in tab] == [2, 1, 1, 3]
    assert [b["mean_score"] for b in tab] == pytest.approx([0.05, 0.25, 0.5, 2.75 / 3])
    assert [b["accuracy"] for b in tab] == pytest.approx([0.0, 1.0, 0.0, 2 / 3])
    # (2 x .05 + 1 x .75 + 1 x .5 + 3 x |2/3 - 2.75/3| = 3 x .25) / 7 = 2.1 / 7
    assert expected_calibration_error(tab) == pytest.approx(0.3)


def test_calibration_empty_bins_and_range():
    tab = calibration_table([0.9, 0.95], [1, 1], n_bins=2)
    assert tab[0] == {"lo": 0.0, "hi": 0.5, "count": 0, "mean_score": None, "accuracy": None}
    assert tab[1]["count"] == 2 and tab[1]["accuracy"] == 1.0
    assert expected_calibration_error(tab) == pytest.approx(0.075)
    assert expected_calibration_error(calibration_table([], [])) is None
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        calibration_table([-0.5, 0.5], [1, 0])


# -- the estimate: scores, labels, answer probability -------------------------------------------------

class ProbBackend:
    """Greedy requests get ``greedy[key] = (text, token probabilities)``, sampled ones ``sampled[key]`` (sample j its
    j-th text, every token at probability 0.5); ``asked`` records ``(key, n, temperature)``."""

    name = "prob"

    def __init__(self, greedy, sampled=None, logprobs=True):
        self.greedy, self.sampled, self.logprobs, self.asked = greedy, sampled or {}, logprobs, []

    def generate(self, requests, *, progress=False, desc=""):
        out = []
        for r in requests:
            key = next(k for k in self.greedy if k in r.messages[-1]["content"])
            self.asked.append((key, r.n, r.temperature))
            if r.temperature == 0:
                text, probs = self.greedy[key]
                logprobs = [math.log(p) for p in probs] if self.logprobs else []
                samples = [Sample(text, [0] * len(probs), logprobs, "stop")]
            else:
                samples = [Sample(t, [0], [math.log(0.5)], "stop") for t in self.sampled[key][:r.n]]
            out.append(GenerationResult(r, samples))
        return out


def clean_rows(*golds):
    return [rows_for(i, g, 9)[0] for i, g in enumerate(golds, start=1)]


def test_greedy_prob_score_and_labels():
    # right at p=0.8 -> 0.9 known; right at 0.4 -> 0.7 uncertain; wrong at 0.6 -> 0.2 unknown; wrong at 0.3 -> 0.35
    scores = [greedy_prob_score(True, 0.8), greedy_prob_score(True, 0.4), greedy_prob_score(False, 0.6),
              greedy_prob_score(False, 0.3)]
    assert scores == pytest.approx([0.9, 0.7, 0.2, 0.35])
    assert [classify(s, known_threshold=0.75, unknown_threshold=0.25) for s in scores] == \
        ["known", "uncertain", "unknown", "uncertain"]


def test_answer_prob_is_the_geometric_mean_of_token_probabilities():
    assert answer_prob(Sample("x", [1, 2, 3], [math.log(0.5), math.log(0.5), 0.0], "stop")) == \
        pytest.approx(0.25 ** (1 / 3))
    assert answer_prob(Sample("x", [], [], "stop")) is None  # a backend without log-probs (openai_chat)


def test_greedy_prob_estimate_with_k1_asks_one_greedy_answer():
    backend = ProbBackend({"Q1 clean": ("4", [0.9, 0.4]), "Q2 clean": ("3", [0.8, 0.8]), "Q3 clean": ("6", [0.1, 1.0])})
    est = estimate_knowledge(clean_rows(4, 5, 6), backend, k=1, temperature=1.0, known_threshold=0.75,
                             unknown_threshold=0.25, max_new_tokens=2, score="greedy_prob")
    # i1 right, p = sqrt(.36) = .6 -> .8 known; i2 wrong, p = .8 -> .1 unknown; i3 right, p = sqrt(.1) = .316 -> .658
    assert [est[i]["score"] for i in ("i1", "i2", "i3")] == pytest.approx([0.8, 0.1, (1 + 0.1 ** 0.5) / 2])
    assert [est[i]["knowledge"] for i in ("i1", "i2", "i3")] == ["known", "unknown", "uncertain"]
    assert est["i2"]["greedy_answer"] == "3" and est["i2"]["greedy_correct"] is False
    assert est["i3"]["clean_accuracy"] == 1.0 and est["i3"]["scored_by"] == "greedy_prob"
    assert backend.asked == [("Q1 clean", 1, 0.0), ("Q2 clean", 1, 0.0), ("Q3 clean", 1, 0.0)]


def test_greedy_prob_with_samples_scores_the_greedy_answer_and_keeps_the_samples():
    backend = ProbBackend({"Q1 clean": ("4", [0.5])}, {"Q1 clean": ["4", "2", "2"]})
    est = estimate_knowledge(clean_rows(4), backend, k=3, temperature=0.7, known_threshold=0.75,
                             unknown_threshold=0.25, max_new_tokens=2, score="greedy_prob")["i1"]
    assert backend.asked == [("Q1 clean", 1, 0.0), ("Q1 clean", 3, 0.7)]
    assert est["score"] == pytest.approx(0.75) and est["knowledge"] == "known"  # right at p = .5
    assert est["clean_accuracy"] == pytest.approx(1 / 3) and est["samples"] == ["4", "2", "2"]
    assert est["modal_answer"] == "2" and est["modal_share"] == pytest.approx(2 / 3)
    # combined: the mean of greedy_prob's .75 and the samples' accuracy 1/3 -> 13/24, uncertain
    est = estimate_knowledge(clean_rows(4), backend, k=3, temperature=0.7, known_threshold=0.75,
                             unknown_threshold=0.25, max_new_tokens=2, score="combined")["i1"]
    assert (est["score"], est["knowledge"], est["scored_by"]) == (pytest.approx(13 / 24), "uncertain", "combined")
    with pytest.raises(ValueError, match="k >= 2"):
        estimate_knowledge(clean_rows(4), backend, k=1, temperature=0.7, known_threshold=0.75,
                           unknown_threshold=0.25, max_new_tokens=2, score="combined")


def test_accuracy_score_is_the_share_of_right_answers_and_k1_records_the_greedy_probability():
    backend = ProbBackend({"Q1 clean": ("4", [0.5])}, {"Q1 clean": ["4", "4", "2", "4"]})
    est = estimate_knowledge(clean_rows(4), backend, k=4, temperature=1.0, known_threshold=0.75,
                             unknown_threshold=0.25, max_new_tokens=2)["i1"]
    assert (est["score"], est["knowledge"], est["scored_by"]) == (0.75, "known", "accuracy")
    assert "answer_prob" not in est and backend.asked == [("Q1 clean", 4, 1.0)]  # no greedy answer asked
    est = estimate_knowledge(clean_rows(4), ProbBackend({"Q1 clean": ("2", [0.25])}), k=1, temperature=1.0,
                             known_threshold=0.75, unknown_threshold=0.25, max_new_tokens=2)["i1"]
    assert (est["score"], est["knowledge"], est["answer_prob"]) == (0.0, "unknown", pytest.approx(0.25))


def test_greedy_prob_without_log_probs_is_refused():
    with pytest.raises(ValueError, match="log-probs"):
        estimate_knowledge(clean_rows(4), ProbBackend({"Q1 clean": ("4", [0.5])}, logprobs=False), k=1,
                           temperature=1.0, known_threshold=0.75, unknown_threshold=0.25, max_new_tokens=2,
                           score="greedy_prob")


def test_knowledge_config_validates_the_score():
    def cfg(**kw):
        return OmegaConf.structured(KnowledgeConfig(enabled=True, **kw))

    from trainer.config import generation_schema
    chat = OmegaConf.structured(generation_schema("openai_chat")(model="m"))  # a backend without token log-probs

    validate_knowledge(cfg(score="greedy_prob", k=1))
    validate_knowledge(cfg(score="greedy_prob", known_threshold=0.6, unknown_threshold=0.4))
    for bad in (dict(known_threshold=0.5), dict(unknown_threshold=0.5)):
        with pytest.raises(ConfigError, match="0.5"):
            validate_knowledge(cfg(score="greedy_prob", **bad))
    with pytest.raises(ConfigError, match="openai_chat"):
        validate_knowledge(cfg(score="greedy_prob"), chat)
    validate_knowledge(cfg(score="combined", k=4, temperature=0.7))
    with pytest.raises(ConfigError, match="k >= 2"):
        validate_knowledge(cfg(score="combined", k=1))
    with pytest.raises(ConfigError, match="0.5"):
        validate_knowledge(cfg(score="combined", known_threshold=0.4, unknown_threshold=0.2))
    with pytest.raises(ConfigError, match="openai_chat"):
        validate_knowledge(cfg(score="combined"), chat)
    validate_knowledge(cfg(), chat)  # accuracy needs no log-probs
    validate_knowledge(cfg(known_threshold=0.5, unknown_threshold=0.0))  # no 0.5 rule for accuracy
    with pytest.raises(Exception, match="greedy_probs"):
        OmegaConf.merge(OmegaConf.structured(KnowledgeConfig), {"score": "greedy_probs"})


# -- knowledge.jsonl and the quality report ---------------------------------------------------------------

def test_knowledge_file_round_trip_and_old_files(tmp_path):
    backend = ProbBackend({"Q1 clean": ("4", [0.5]), "Q2 clean": ("3", [1.0])})
    est = estimate_knowledge(clean_rows(4, 5), backend, k=1, temperature=1.0, known_threshold=0.75,
                             unknown_threshold=0.25, max_new_tokens=2, score="greedy_prob")
    path = write_jsonl_atomic(tmp_path / "knowledge.jsonl", [knowledge_record(e) for e in est.values()])
    back = read_estimates(path)
    assert back == {i: knowledge_record(e) for i, e in est.items()}
    assert set(back["i1"]) == {"item_id", "knowledge", "score", "scored_by", "clean_accuracy", "k", "modal_share",
                               "modal_answer", "samples", "greedy_answer", "greedy_correct", "answer_prob"}
    assert load_knowledge(path) == {"i1": "known", "i2": "unknown"}
    old = tmp_path / "old.jsonl"  # written before scores: clean_accuracy is the score
    old.write_text(json.dumps({"item_id": "a", "knowledge": "uncertain", "clean_accuracy": 0.5, "k": 4}) + "\n")
    assert read_estimates(old)["a"]["score"] == 0.5
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"item_id": "a", "knowledge": "known", "score": 1.5}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl, line 1, field 'score'"):
        read_estimates(bad)


def write_quality_inputs(tmp_path):
    est = {"a": ("known", 1.0, 0.9), "b": ("known", 0.75, 0.4), "c": ("uncertain", 0.5, 0.7),
           "d": ("unknown", 0.25, 0.2), "e": ("unknown", 0.0, 0.6), "z": ("known", 1.0, 1.0)}  # z: not evaluated
    kpath = write_jsonl_atomic(tmp_path / "knowledge.jsonl", [
        {"item_id": i, "knowledge": lab, "score": s, "clean_accuracy": s, "answer_prob": p}
        for i, (lab, s, p) in est.items()])
    clean = {"a": True, "b": False, "c": True, "d": False, "e": False}
    spath = write_jsonl_atomic(tmp_path / "item_scores.jsonl", [
        row for i, ok in clean.items() for row in (
            {"item_id": i, "condition": "clean", "correct": ok}, {"item_id": i, "condition": "misleading",
                                                                  "correct": not ok})])
    return kpath, spath


def test_knowledge_quality_by_hand(tmp_path):
    kpath, spath = write_quality_inputs(tmp_path)
    q = knowledge_quality(kpath, spath)
    # right {a: 1, c: .5}, wrong {b: .75, d: .25, e: 0}: a beats all 3, c beats d and e -> 5 / 6
    assert (q["items"], q["positives"], q["auc"]) == (5, 2, pytest.approx(5 / 6))
    assert q["counts"] == {"known": 2, "unknown": 2, "uncertain": 1}
    assert q["accuracy"] == {"known": 0.5, "unknown": 0.0, "uncertain": 1.0}
    # bins of .2: e (0) | d (.25) | c (.5) | b (.75) | a (1.0)
    assert [(b["count"], b["accuracy"]) for b in q["calibration"]] == [(1, 0.0), (1, 0.0), (1, 1.0), (1, 0.0), (1, 1.0)]
    # |0-0| + |0-.25| + |1-.5| + |0-.75| + |1-1| = 1.5 over 5 items
    assert q["ece"] == pytest.approx(0.3)
    # another score of the same file: answer_prob right {.9, .7}, wrong {.4, .2, .6}: all 6 pairs ordered
    assert knowledge_quality(kpath, spath, score="answer_prob")["auc"] == 1.0
    # against another condition: misleading is right exactly where clean is wrong -> 1 - 5/6
    assert knowledge_quality(kpath, spath, condition="misleading")["auc"] == pytest.approx(1 / 6)


def test_knowledge_quality_refuses_an_unlabelled_item_and_a_missing_score(tmp_path):
    kpath, spath = write_quality_inputs(tmp_path)
    more = tmp_path / "more.jsonl"
    more.write_text(spath.read_text() + json.dumps({"item_id": "f", "condition": "clean", "correct": True}) + "\n")
    with pytest.raises(DataError, match="no knowledge label"):
        knowledge_quality(kpath, more)
    with pytest.raises(DataError, match="modal_share"):
        knowledge_quality(kpath, spath, score="modal_share")
    with pytest.raises(ValueError, match="unknown score field"):
        knowledge_quality(kpath, spath, score="texts")


def test_mining_with_greedy_prob_labels_by_the_greedy_answer_and_keeps_the_irrelevant_pool_wrong():
    from trainer.data.mining import mine

    greedy = {"Q1 clean": ("4", [0.9]), "Q1 hint 7": ("7", [1.0]),  # known (.95); follows the hint: a quartet
              "Q2 clean": ("3", [0.8]), "Q2 hint 5": ("5", [1.0]),  # unknown (.1); its samples' mode 3 is wrong
              "Q3 clean": ("2", [0.6]), "Q3 hint 6": ("6", [1.0])}  # unknown (.2); its samples' mode 6 is the gold
    sampled = {"Q1 clean": ["4", "4", "4"], "Q2 clean": ["3", "3", "3"], "Q3 clean": ["6", "6", "2"]}
    rows = rows_for(1, 4, 7) + rows_for(2, 5, 8) + rows_for(3, 6, 9)
    kcfg = KnowledgeConfig(enabled=True, k=3, score="greedy_prob", unknown_irrelevant=True, stable_threshold=0.6)
    pairs, stats = mine(rows, ProbBackend(greedy, sampled), max_new_tokens=2, use_fallback=False,
                        fallback_note="n {gold}", leak_patterns=[], model_name="m", knowledge=kcfg, seed=0)
    assert stats["knowledge"]["counts"] == {"known": 1, "unknown": 2, "uncertain": 0}
    assert stats["knowledge"]["settings"]["score"] == "greedy_prob"
    pools = sorted((p["item_id"], p.get("pool", "quartet")) for p in pairs
                   if p["condition"] in ("correct", "irrelevant"))
    # i3's stable answer is the gold: no unknown_irrelevant pair prefers it over the hinted gold
    assert pools == [("i1", "quartet"), ("i1", "quartet"), ("i2", "unknown_correct"), ("i2", "unknown_irrelevant"),
                     ("i3", "unknown_correct")]
    u3 = next(p for p in pairs if p["item_id"] == "i3")
    assert (u3["chosen"], u3["rejected"]) == ("6", "2")  # rejected: the first wrong sample
    json.dumps(stats)  # mining_stats.json stays plain JSON


def test_evaluation_with_greedy_prob_shares_the_greedy_answers_and_records_their_probability(tmp_path, monkeypatch):
    """recipes/evaluate.py, knowledge.score=greedy_prob with k=2 on the tiny model (HF backend): the estimate's
    greedy clean answers serve the evaluation's clean rows again, and knowledge.jsonl scores them by probability."""
    from recipe_utils import compose, load_recipe, spy_greedy_memos

    made = spy_greedy_memos(monkeypatch)
    load_recipe("evaluate").run(compose("evaluate", [f"out_dir={tmp_path}", "eval.max_rows=8", "knowledge.enabled=true",
                                                     "knowledge.k=2", "knowledge.score=greedy_prob"]))
    assert len(made) == 1 and made[0].hits == 2  # 8 rows = 2 items x 4 conditions: both clean rows served again
    est = read_estimates(tmp_path / "knowledge.jsonl")
    assert len(est) == 2
    for e in est.values():
        assert e["scored_by"] == "greedy_prob" and e["k"] == 2 and 0 < e["answer_prob"] <= 1
        assert e["score"] == pytest.approx(greedy_prob_score(e["greedy_correct"], e["answer_prob"]))
