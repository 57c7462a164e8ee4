"""End to end per family: expand a fixture -> fake responses -> score_responses -> files and metrics;
atomic outputs; and run_matched_eval through the HF backend on the tiny model."""

import json
import os
from pathlib import Path

import pytest

import eval_hooks
from eval_hooks import DataError, load_rows, read_responses, run_matched_eval, score_responses
from eval_hooks.evaluate import build_requests, score_rows
from selectrust.generation.prompts import PromptSettings, render_prompt_text

DATA = Path(__file__).parents[1] / "data" / "eval"


def test_import_is_light():
    import subprocess
    import sys

    code = "import sys, eval_hooks; print(any(m in sys.modules for m in ('torch', 'transformers', 'matplotlib')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[2])
    assert out.stdout.strip() == "False"
    assert set(eval_hooks.__all__) >= {"load_rows", "score_responses", "run_matched_eval", "FAMILIES"}


def _answer(r, right: bool) -> str:
    """A response that is right or wrong for row ``r`` in the family's answer format."""
    at, gold = r["answer_type"], r["gold"]
    if at == "numeric":
        return f"Working...\nANSWER: {gold if right else float(gold) + 1}"
    if at == "boolean":
        yes = str(gold).lower() in ("yes", "true")
        return "ANSWER: " + ("yes" if yes == right else "no")
    if at in ("multiple_choice", "choice"):
        return "ANSWER: " + (gold if right else ("A" if gold != "A" else "B"))
    if at == "label":
        return "ANSWER: " + (gold if right else "Uncertain")
    raise AssertionError(at)


# -- MIST: hand-computed metrics ------------------------------------------------------------------------

def test_mist_end_to_end(tmp_path):
    rows = load_rows("mist", DATA / "mist_small.jsonl")
    # m1 (numeric): right everywhere except misleading; m2 (MC): wrong when clean, right otherwise;
    # m3 (boolean): clean right, misleading unparsable, others right.
    wrong = {"m1/misleading", "m2/clean"}
    resp = {r["row_id"]: _answer(r, r["row_id"] not in wrong) for r in rows}
    resp["m3/misleading"] = "I cannot decide."
    out = tmp_path / "eval"
    m = score_responses("mist", rows, resp, out, step=7, n_boot=50)
    assert {"item_scores.jsonl", "metrics.json", "report.md"} <= set(os.listdir(out))
    assert any(n.endswith(".png") for n in os.listdir(out))
    assert json.loads((out / "metrics.json").read_text()) == json.loads(json.dumps(m))
    acc = m["accuracy"]
    assert acc["clean"] == pytest.approx(2 / 3) and acc["misleading"] == pytest.approx(1 / 3)
    assert acc["correct"] == 1.0 and acc["irrelevant"] == 1.0
    assert m["overall"] == pytest.approx((2 / 3 + 1 / 3 + 1 + 1) / 4)
    assert m["sc2w"] == pytest.approx(1.0)  # clean-correct items m1, m3 both fail when misled: 2/2
    assert m["unparsed"]["misleading"] == 1 and m["step"] == 7
    scores = [json.loads(l) for l in open(out / "item_scores.jsonl")]
    assert len(scores) == 12 and all("prompt" not in s for s in scores)
    s = {x["row_id"]: x for x in scores}
    assert s["m3/misleading"]["parse_ok"] is False and s["m3/misleading"]["parsed"] is None
    assert s["m1/misleading"]["parsed"] == "19" and s["m1/misleading"]["correct"] is False
    assert s["m2/correct"]["topic"] == "science" and s["m2/correct"]["parsed"] == "B"


# -- the other families ---------------------------------------------------------------------------------

def test_box2_end_to_end(tmp_path):
    rows = load_rows("box2", DATA / "box2_small.jsonl")
    # wrong exactly on rows whose workflow contains a bad continuation (bad and mixed_*)
    resp = {r["row_id"]: _answer(r, r["regime"] not in ("bad", "mixed")) for r in rows}
    m = score_responses("box2", rows, resp, tmp_path / "o")
    assert m["score"] == {"none": 1.0, "good": 1.0, "bad": 0.0, "partial": 1.0, "mixed": 0.0}
    assert m["delta"] == {"use": 0.0, "bad": -1.0, "stop": 0.0, "switch": -1.0}
    assert set(m["recovery"]) == {"partial", "mixed"}
    assert (tmp_path / "o" / "report.md").exists()


def test_taste_end_to_end(tmp_path):
    rows = load_rows("taste", DATA / "taste_small.jsonl")
    # always answer "A": right exactly where gold is A -> one order right per item (CW or WC), strict 0
    resp = {r["row_id"]: "ANSWER: A" for r in rows}
    m = score_responses("taste", rows, resp, tmp_path / "o")
    assert m["strict"] == 0.0 and m["mean"] == 0.5
    assert m["paired_outcomes"]["CC"] == 0 and m["paired_outcomes"]["WW"] == 0
    assert m["paired_outcomes"]["CW"] + m["paired_outcomes"]["WC"] == 4
    assert set(m["per_cell"]) == {"parallel_engineering", "detour_engineering", "parallel_research",
                                  "detour_research"}
    scores = [json.loads(l) for l in open(tmp_path / "o" / "item_scores.jsonl")]
    assert all(s["choice"] == "A" for s in scores)


def test_med_end_to_end(tmp_path):
    rows = load_rows("med", DATA / "med_small.jsonl")
    # original: agree with the label everywhere; nonce: Uncertain under skept_evd, else agree
    resp = {r["row_id"]: _answer(r, not (r["category"] == "nonce" and r["variant"] == "skept_evd")) for r in rows}
    m = score_responses("med", rows, resp, tmp_path / "o")
    assert m["ea_rate"]["original"]["skept_evd"] == 1.0 and m["ea_rate"]["nonce"]["skept_evd"] == 0.0
    assert m["uncertain_rate"]["nonce"]["skept_evd"] == 1.0 and m["uncertain_rate"]["nonce"]["evd"] == 0.0
    s = {x["row_id"]: x for x in score_rows("med", rows, resp)}
    assert s["q7-nonce/nonce/skept_evd"]["parsed"] == "Uncertain" and s["q7-nonce/nonce/skept_evd"]["parse_ok"]


# -- response validation and atomic output ----------------------------------------------------------------

def test_missing_and_unknown_responses_write_nothing(tmp_path):
    rows = load_rows("taste", DATA / "taste_small.jsonl")
    resp = {r["row_id"]: "ANSWER: A" for r in rows}
    out = tmp_path / "o"
    with pytest.raises(DataError, match="no response for 1 of 8"):
        score_responses("taste", rows, {k: v for k, v in list(resp.items())[1:]}, out)
    with pytest.raises(DataError, match="unknown row ids"):
        score_responses("taste", rows, {**resp, "t9/seeded": "x"}, out)
    assert os.listdir(tmp_path) == []  # not even a temp dir left behind


def test_read_responses_errors(tmp_path):
    rows = load_rows("taste", DATA / "taste_small.jsonl")
    p = tmp_path / "r.jsonl"
    p.write_text('{"row_id": "t1/seeded", "response": "ANSWER: A"}\n{"row_id": "t1/seeded", "response": "x"}\n')
    with pytest.raises(DataError, match="duplicate row_id") as ei:
        read_responses(p, rows)
    assert ei.value.line == 2 and ei.value.path == str(p)
    p.write_text('{"row_id": "t1/seeded", "response": "ANSWER: A"}\n{"row_id": "zz", "response": "x"}\n')
    with pytest.raises(DataError, match="unknown row_id 'zz'") as ei:
        read_responses(p, rows)
    assert ei.value.line == 2
    p.write_text('{"row_id": "t1/seeded", "response": 3}\n')
    with pytest.raises(DataError, match="expected a string"):
        read_responses(p, rows)
    p.write_text('{"row_id": "t1/seeded", "response": null}\n')
    assert read_responses(p, rows) == {"t1/seeded": ""}


def test_failed_report_leaves_previous_output_intact(tmp_path, monkeypatch):
    rows = load_rows("taste", DATA / "taste_small.jsonl")
    resp = {r["row_id"]: "ANSWER: A" for r in rows}
    out = tmp_path / "o"
    score_responses("taste", rows, resp, out)
    before = {n: (out / n).read_bytes() for n in os.listdir(out)}

    from eval_hooks.families import get_family

    def boom(*a, **k):
        raise RuntimeError("plotting failed")

    monkeypatch.setattr(type(get_family("taste")), "report_section", boom)
    with pytest.raises(RuntimeError, match="plotting failed"):
        score_responses("taste", rows, {k: "ANSWER: B" for k in resp}, out)
    assert {n: (out / n).read_bytes() for n in os.listdir(out)} == before
    assert sorted(os.listdir(tmp_path)) == ["o"]


def test_foreign_files_in_out_dir_are_kept(tmp_path):
    rows = load_rows("taste", DATA / "taste_small.jsonl")
    out = tmp_path / "shared"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    score_responses("taste", rows, {r["row_id"]: "ANSWER: A" for r in rows}, out)
    assert (out / "notes.txt").read_text() == "mine" and (out / "metrics.json").exists()


# -- generation wiring ------------------------------------------------------------------------------------

def test_build_requests_prompt_defense():
    rows = load_rows("taste", DATA / "taste_small.jsonl")[:2]
    reqs = build_requests(rows, prompt_settings=PromptSettings(system_prompt="SYS", prompt_prefix="WARN"),
                          max_new_tokens=5, stop=["\n\n"])
    assert reqs[0].messages[0] == {"role": "system", "content": "SYS"}
    assert reqs[0].messages[1]["content"] == "WARN\n\n" + rows[0]["prompt"]
    assert reqs[0].max_new_tokens == 5 and reqs[0].stop == ["\n\n"] and reqs[0].temperature == 0.0
    plain = PromptSettings(use_chat_template=False, prompt_prefix="WARN")
    raw = build_requests(rows, prompt_settings=plain)
    assert render_prompt_text(None, raw[0].messages, plain.transport()) == "WARN\n\n" + rows[0]["prompt"] + "\n"


class _EchoBackend:
    """Stand-in backend: answers each request with a fixed text, records what it was sent."""

    name = "echo"

    def __init__(self, text, prompt_settings=None):
        self.text, self.requests, self.progress = text, None, None
        self.prompt_settings = prompt_settings

    def generate(self, requests, *, progress=False, desc="generate"):
        from selectrust.generation.backends.base import GenerationResult, Sample

        self.requests, self.progress = list(requests), progress
        return [GenerationResult(request=r, samples=[Sample(self.text, [], [], "stop")]) for r in requests]


def test_run_matched_eval_with_stub_backend(tmp_path):
    be = _EchoBackend("ANSWER: B", PromptSettings(prompt_prefix="P"))
    m = run_matched_eval(be, DATA / "taste_small.jsonl", "taste", tmp_path / "o", step=3, progress=False)
    assert len(be.requests) == 8 and be.progress is False
    assert be.requests[0].messages[-1]["content"].startswith("P\n\n")
    assert m["mean"] == 0.5 and m["step"] == 3 and m["eval_settings"]["prompt_prefix"] == "P"


def test_run_matched_eval_hf_tiny(tiny_model, tiny_tokenizer, tmp_path):
    from selectrust.generation.backends import HFBackend

    rows = load_rows("mist", DATA / "mist_small.jsonl")[:8]
    backend = HFBackend(tiny_model, tiny_tokenizer, batch_size=8)
    m = run_matched_eval(backend, rows, "mist", tmp_path / "o", max_new_tokens=4, progress=False, n_boot=20)
    scores = [json.loads(l) for l in open(tmp_path / "o" / "item_scores.jsonl")]
    assert len(scores) == 8 and all(isinstance(s["response"], str) for s in scores)
    assert set(m["accuracy"]) == {"clean", "misleading", "correct", "irrelevant"}
    assert 0.0 <= m["overall"] <= 1.0 and m["eval_settings"]["backend"] == "hf"
