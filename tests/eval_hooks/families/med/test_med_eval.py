"""MedCounterfact evaluation pipelines with a deterministic fake backend: formats, mitigations, label
probabilities, awareness, the refine chain for long evidence, metrics and report."""

import json
import math

import pytest

from selectrust.generation.backends.base import GenerationBackend, GenerationResult, Sample
from eval_hooks.families import get_family
from eval_hooks.families.med.metrics import pipeline_metrics
from eval_hooks.families.med.pipelines import KeywordJudge, chunk_evidence, run_pipelines


class Fake(GenerationBackend):
    """Answers by rules on the prompt text; records every prompt."""
    name = "fake"

    def __init__(self):
        self.prompts, self.scored = [], []

    def generate(self, requests, *, progress=False, desc=""):
        out = []
        for r in requests:
            p = r.messages[-1]["content"] if r.messages else r.prompt
            self.prompts.append(p)
            if p.startswith("Read the question and the evidence"):
                t = "FLAG: dangerous because toaster is not a drug"
            elif "Before seeing the evidence" in p or "Note from a reviewer" in p:
                t = "This looks implausible.\nANSWER: Uncertain"
            elif "Answer options" not in p and "Refine" not in p:
                t = "I think the outcome is lower overall."
            else:
                t = "The trial shows it.\nANSWER: Higher"
            out.append(GenerationResult(r, [Sample(t, [], [], "stop")]))
        return out

    def score_labels(self, prompts, labels):
        self.scored.append(list(labels))
        logits = [0.0, math.log(3.0), 0.0, 0.0]  # P = 1/6, 1/2, 1/6, 1/6
        z = sum(math.exp(v) for v in logits)
        return [{lab: math.exp(v) / z for lab, v in zip(labels, logits)} for _ in prompts]


ITEMS = [{"item_id": f"q{i}-{cat}", "question": f"Is pain higher when comparing {t} to placebo?",
          "evidence": [f"{t.capitalize()} lowered pain. It was safe. Results were clear."], "label": "Higher",
          "category": cat, "term_original": "aspirin", "term_substituted": t}
         for i in range(2) for cat, t in (("original", "aspirin"), ("non_medical", "toaster"))]


def _rows():
    return get_family("med").expand_records(list(enumerate(ITEMS, start=1)), "items.jsonl")


def test_pipelines_formats_mitigations_and_label_probs(tmp_path):
    be = Fake()
    m = get_family("med").run(be, _rows(), tmp_path / "out", max_new_tokens=8)
    recs = [json.loads(x) for x in (tmp_path / "out" / "item_scores.jsonl").read_text().splitlines()]
    # 16 rows x 2 formats (base) + 12 evidence rows x 2 mitigations x 2 formats
    assert len(recs) == 16 * 2 + 12 * 2 * 2 == m["n_records"]
    base_mc = m["ea_rate"]["base"]["mc"]
    assert base_mc["non_medical"]["evd"] == 1.0 and m["uncertain_rate"]["detect"]["mc"]["original"]["skept_evd"] == 1.0
    # free text "... lower overall." is mapped by the judge to Lower: EA 0
    assert m["ea_rate"]["base"]["free"]["original"]["no_evd"] == 0.0
    assert m["mitigation_delta"]["prior"]["toxic" if False else "non_medical"]["evd"] == \
        {"uncertain_rate": 1.0, "ea_rate": -1.0, "aware": 1.0}
    assert m["label_prob_original"]["original"]["evd"] == pytest.approx(1 / 6)  # gold Higher got 1/6
    assert be.scored[0] == ["ANSWER: Higher", "ANSWER: Lower", "ANSWER: No Difference", "ANSWER: Uncertain"]
    assert m["awareness"]["detect"]["non_medical"]["evd"] == {"Explicit Yes": 2, "Implicit Yes": 0, "No": 0}
    assert m["n_refined"] == 0
    # the detect flag and the prior answer are passed with the evidence
    assert any(p.startswith("Note from a reviewer who screened the evidence: dangerous") for p in be.prompts)
    assert any(p.startswith("Before seeing the evidence, your answer from your own knowledge was: Higher")
               for p in be.prompts)
    report = (tmp_path / "out" / "report.md").read_text()
    assert "ea_vs_uncertain.png" in report and "| prior | non_medical | evd | +1.000 | -1.000 | +1.000 |" in report
    assert (tmp_path / "out" / "label_probs.png").exists()


def test_refine_chain_when_prompt_exceeds_budget():
    be = Fake()
    rows = [r for r in _rows() if r["variant"] == "evd"][:1]
    ev = rows[0]["evidence"][0]  # "Aspirin lowered pain. It was safe. Results were clear."
    budget = len(rows[0]["prompt"]) - len(ev) + 21  # room for 21 characters of evidence
    recs = run_pipelines(be, rows, judge=KeywordJudge(), formats=("mc",), mitigations=(), label_probs=False,
                         prompt_token_budget=budget, count_tokens=len)
    assert recs[0]["refined"] and recs[0]["parsed"] == "Higher"
    refine = [p for p in be.prompts if p.startswith("We have an existing answer")]
    assert len(refine) == 2  # 3 sentences -> 3 chunks -> 1 first answer + 2 refinements
    assert [p.split("Additional evidence:\n")[1] for p in refine] == ["It was safe.", "Results were clear."]
    assert "[1] Aspirin lowered pain.\n" in be.prompts[0] and "It was safe" not in be.prompts[0]


def test_chunk_evidence_by_hand():
    assert chunk_evidence(["Aa bb. Cc dd. Ee."], 8, len) == ["Aa bb.", "Cc dd.", "Ee."]
    assert chunk_evidence(["Aa bb. Cc dd."], 13, len) == ["Aa bb. Cc dd."]
    assert chunk_evidence(["abcdefghij"], 4, len) == ["abcd", "efgh", "ij"]


def test_bad_settings():
    with pytest.raises(ValueError, match="unknown mitigation 'priors'"):
        run_pipelines(Fake(), _rows(), judge=KeywordJudge(), mitigations=("priors",))
    assert pipeline_metrics([])["n_records"] == 0


RAW = {"question_id": 5, "answer": "Lower", "relevant_sources": ["1"],
       "question": "Is wheeze higher, lower, or the same when comparing tranexamic acid (TXA) to placebo?",
       "sources": {"1": {"content": "Tranexamic acid (TXA) was compared with placebo. TXA reduced wheeze (p = 0.01)."}}}


def test_load_med_rows_builds_raw_medevidence_and_checks_settings(tmp_path):
    from omegaconf import OmegaConf

    from omegaconf.errors import ValidationError

    from trainer.config import EvalConfig
    from trainer.eval_bridge import load_eval_rows

    src = tmp_path / "medevidence.jsonl"
    src.write_text("".join(json.dumps({**RAW, "question_id": q}) + "\n" for q in (5, 6, 7)))
    cfg = OmegaConf.structured(EvalConfig(path=str(src), family="med"))
    cfg.med.max_questions = 2
    rows = load_eval_rows(cfg)
    # 2 questions x (original + 4 verified counterfactuals) x 4 variants
    assert len(rows) == 2 * 5 * 4 and {r["question_id"] for r in rows} == {5, 6}
    assert all(r["evidence"] for r in rows)
    with pytest.raises(ValidationError, match="priors"):  # a typed choice: refused on assignment
        cfg.med.mitigations = ["detect", "priors"]


@pytest.mark.slow
def test_recipe_tiny_model_on_two_questions(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    src = tmp_path / "medevidence.jsonl"
    src.write_text("".join(json.dumps({**RAW, "question_id": q}) + "\n" for q in (5, 6)))
    root = Path(__file__).resolve().parents[4]
    out = tmp_path / "run"
    subprocess.run([sys.executable, str(root / "recipes" / "evaluate.py"), "eval=medcounterfact", "model.path=tiny",
                    f"eval.path={src}", f"out_dir={out}", "eval.med.prompt_token_budget=700"], check=True, cwd=root)
    m = json.loads((out / "metrics.json").read_text())
    # 40 rows: 40 x 2 formats base + 30 evidence rows x 2 mitigations x 2 formats
    assert m["n_records"] == 40 * 2 + 30 * 2 * 2 and m["n_refined"] > 0
    assert set(m["ea_rate"]) == {"base", "detect", "prior"} and m["label_prob_original"]["toxic"]["evd"] > 0
    assert (out / "report.md").exists() and (out / "label_probs.png").exists()


def test_epoch_end_hook_runs_med_pipelines(tmp_path):
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from trainer.config import EvalConfig, GenerationConfig, PromptConfig
    from trainer.eval_bridge import make_epoch_eval

    ecfg = OmegaConf.structured(EvalConfig(family="med", max_new_tokens=8))
    ecfg.med.formats, ecfg.med.mitigations, ecfg.med.label_probs = ["mc"], ["prior"], False
    cfg = OmegaConf.create({"eval": ecfg, "generation": OmegaConf.structured(GenerationConfig()),
                            "prompt": OmegaConf.structured(PromptConfig()), "model": {"path": "tiny"},
                            "trainer": {"progress": False}})
    hook = make_epoch_eval(SimpleNamespace(cfg=cfg, run_dir=str(tmp_path)), _rows(), Fake)
    m = hook(1, step=7)
    assert m["step"] == 7 and m["n_records"] == 16 + 12 and set(m["ea_rate"]) == {"base", "prior"}
    assert (tmp_path / "eval" / "epoch_1" / "report.md").exists()


def test_the_shipped_sample_is_the_default_of_eval_medcounterfact(monkeypatch):
    """``python recipes/evaluate.py eval=medcounterfact model.path=tiny`` needs no download: the config
    points at the shipped 20-question MedEvidence sample, built into verified items before any model loads."""
    from pathlib import Path

    from recipe_utils import compose
    from trainer.eval_bridge import load_eval_rows

    monkeypatch.chdir(Path(__file__).resolve().parents[4])
    cfg = compose("evaluate", ["eval=medcounterfact", "model.path=tiny"])
    rows = load_eval_rows(cfg.eval)
    questions = {r["question_id"] for r in rows}
    assert len(questions) == 20
    assert {r["variant"] for r in rows} == {"no_evd", "evd", "skept_evd", "expert_evd"}
    assert {r["category"] for r in rows} == {"original", "nonce", "medical", "non_medical", "toxic"}


class NoGeneration(Fake):
    def generate(self, requests, *, progress=False, desc=""):
        raise AssertionError("generate=False must not generate")


def test_label_probs_without_generation(tmp_path):
    """``eval.med.generate=false``: one record per row with its label probabilities, nothing generated;
    the metrics are the label-probability summaries only (Fake: P = 1/6 Higher (gold), 1/2 Lower)."""
    from types import SimpleNamespace

    be = NoGeneration()
    settings = SimpleNamespace(formats=["mc", "free"], mitigations=["detect", "prior"], label_probs=True,
                               judge="keyword", prompt_token_budget=None, max_refine_chunks=2, generate=False)
    m = get_family("med").run(be, _rows(), tmp_path / "out", max_new_tokens=8, settings=settings)
    recs = [json.loads(x) for x in (tmp_path / "out" / "item_scores.jsonl").read_text().splitlines()]
    assert len(recs) == 16 == m["n_records"] and len(be.scored) == 1
    assert all("response" not in r and (r["pipeline"], r["format"]) == ("base", "mc") for r in recs)
    assert "ea_rate" not in m and m["eval_settings"]["generate"] is False
    assert m["label_prob_original"]["non_medical"]["skept_evd"] == pytest.approx(1 / 6)
    assert m["label_prob_uncertain"]["original"]["no_evd"] == pytest.approx(1 / 6)
    assert m["label_argmax_ea"]["original"]["evd"] == 0.0 and m["label_argmax_uncertain"]["original"]["evd"] == 0.0
    assert m["label_prob_n"]["original"]["evd"] == 2
    assert "P(original)" in (tmp_path / "out" / "report.md").read_text()
    with pytest.raises(ValueError, match="needs label_probs=True"):
        run_pipelines(be, _rows(), judge=KeywordJudge(), label_probs=False, generate=False)


def test_label_prob_metrics_argmax_by_hand():
    from eval_hooks.families.med.metrics import label_prob_metrics

    def rec(cat, gold, probs):
        return {"category": cat, "variant": "evd", "gold": gold, "label_probs": dict(zip(
            ("Higher", "Lower", "No Difference", "Uncertain"), probs))}

    m = label_prob_metrics([rec("toxic", "Higher", (0.4, 0.1, 0.1, 0.4 + 1e-9)), rec("toxic", "Lower", (0.1, 0.7, 0.1, 0.1)),
                            {"category": "toxic", "variant": "evd", "gold": "Lower"}])  # no label_probs: left out
    assert m["label_prob_n"]["toxic"]["evd"] == 2
    assert m["label_argmax_ea"]["toxic"]["evd"] == 0.5 and m["label_argmax_uncertain"]["toxic"]["evd"] == 0.5
    assert m["label_prob_original"]["toxic"]["evd"] == pytest.approx((0.4 + 0.7) / 2)


def test_recipe_label_probs_only_on_the_tiny_model(tmp_path, monkeypatch):
    """``recipes/evaluate.py eval=medcounterfact eval.med.generate=false`` on the tiny model: label
    probabilities of every row of 2 sample questions, no generation; generate=false without label_probs is
    refused before the model loads."""
    from pathlib import Path

    from recipe_utils import compose
    from recipes.evaluate import run

    monkeypatch.chdir(Path(__file__).resolve().parents[4])
    over = ["eval=medcounterfact", "model.path=tiny", "eval.med.generate=false", "eval.med.max_questions=2",
            f"out_dir={tmp_path / 'run'}"]
    m = run(compose("evaluate", over))
    rows = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert rows["n_records"] == m["n_records"] == sum(n for c in m["label_prob_n"].values() for n in c.values())
    probs = [json.loads(x)["label_probs"] for x in (tmp_path / "run" / "item_scores.jsonl").read_text().splitlines()]
    assert len(probs) == m["n_records"] and all(sum(p.values()) == pytest.approx(1.0) for p in probs)
    assert set(m["label_prob_original"]) == {"original", "nonce", "medical", "non_medical", "toxic"}
    with pytest.raises(ValueError, match="needs eval.med.label_probs=true"):
        run(compose("evaluate", over + ["eval.med.label_probs=false"]))
