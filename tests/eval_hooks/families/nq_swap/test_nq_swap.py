"""NQ-Swap (docs/nq_swap.md): the open_answer judge, the builder (build-nq-swap), NQ-Swap's metrics checked against
hand-computed values, and the end-to-end path from the shipped sample to a scored report."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from eval_hooks.__main__ import main as cli
from eval_hooks.builders.nq_swap import (HUB_REVISION, HUB_SPLIT, SAMPLE_PATH, build_rows, clean_passage,
                                         read_source)
from eval_hooks.families import get_family
from eval_hooks.parsers import answer_status, normalize_gold, parse_row_answer, row_answer_matches
from eval_hooks.parsers.open_answer import open_tokens, read_open_answer
from selectrust.core.errors import DataError

ROOT = Path(__file__).resolve().parents[4]
ROW = {"answer_type": "open_answer", "gold": "23", "gold_aliases": ["twenty three episodes"], "wrong_value": "775"}


def _records():
    return read_source(SAMPLE_PATH)[0]


def _words(text: str) -> str:
    return f" {' '.join(open_tokens(text))} "


# -- the judge -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("a, b", [
    ("The Beatles", "beatles"), ("O'Meara", "omeara"), ("twenty-three", "23"), ("1,000,000", "1000000"),
    ("seven hundred seventy-five", "775"), ("July 4th, 1776", "4 july 1776"), ("the 4th of July 1776", "4 july 1776"),
    ("Sept. 3, 2001", "3 september 2001"), ("Bogotá", "bogota"), ("An Apple a day", "apple day")])
def test_normalisation_is_squad_style_with_numbers_and_dates(a, b):
    assert " ".join(open_tokens(a)) == b


@pytest.mark.parametrize("response, parsed, status, org, sub", [
    ("The season contained 23 episodes.", "23 episodes", "candidate", True, False),  # the alias, the longer name
    ("Twenty-three.", "23", "candidate", True, False),
    ("775", "775", "candidate", False, True),
    ("It has 23 episodes, or maybe 775.", None, "multiple", False, False),
    ("The passage says 775. Answer: 23", "23", "candidate", True, False),  # the final-answer marker decides
    ("Season 4 of Chicago Fire has many episodes.", "season 4 of chicago fire has many episodes", "outside", False,
     False),
    ("I don't know.", None, "no_answer", False, False),
    ("The passage does not mention it.", None, "no_answer", False, False),
    ("", None, "no_answer", False, False),
    ("1923 episodes", "1923 episodes", "outside", False, False),  # whole words: 23 is not in 1923
])
def test_the_judge_reads_which_answer_a_response_names(response, parsed, status, org, sub):
    p = parse_row_answer(response, ROW)
    assert p == parsed and answer_status(p, ROW, response) == status
    assert row_answer_matches(p, ROW) is org and row_answer_matches(p, ROW, "wrong_value") is sub


def test_an_alias_counts_and_a_name_inside_a_longer_one_does_not():
    row = {"answer_type": "open_answer", "gold": "Paul", "gold_aliases": ["Paul McCartney"],
           "wrong_value": "Paul Simon"}
    assert row_answer_matches(parse_row_answer("Paul McCartney sang it.", row), row)
    sung = parse_row_answer("It was sung by Paul Simon.", row)
    assert sung == "paul simon" and row_answer_matches(sung, row, "wrong_value") and not row_answer_matches(sung, row)
    assert read_open_answer("Paul Simon and Paul McCartney", [("Paul", "Paul McCartney"), ("Paul Simon",)]).status \
        == "multiple"


def test_open_answer_is_a_registered_answer_type_with_checked_golds():
    assert normalize_gold("The Beatles", "open_answer") == "beatles"
    assert normalize_gold("The", "open_answer") is None and normalize_gold(7, "open_answer") is None


# -- the builder -----------------------------------------------------------------------------------------
def test_rows_from_the_shipped_sample():
    rows, stats = build_rows(_records(), items=12, seed=0)
    assert stats["items"] == 12 and len(rows) == 48 and stats["questions"] == 50
    by_item: dict = {}
    for r in rows:
        by_item.setdefault(r["item_id"], {})[r["condition"]] = r
    assert all(set(v) == {"clean", "misleading", "correct", "irrelevant"} for v in by_item.values())
    for rs in by_item.values():
        gold, wrong = rs["clean"]["gold"], rs["clean"]["wrong_value"]
        names = [gold, *rs["clean"].get("gold_aliases", [])]
        assert rs["clean"]["context"] is None and "Passage:" not in rs["clean"]["prompt"]
        assert any(_words(n) in _words(rs["correct"]["context"]) for n in names)
        assert _words(wrong) in _words(rs["misleading"]["context"])
        assert _words(gold) not in _words(rs["misleading"]["context"]) or _words(gold) in _words(wrong)
        assert not any(_words(n) in _words(rs["irrelevant"]["context"]) for n in [*names, wrong])
        assert rs["irrelevant"]["context"] in {o["correct"]["context"] for o in by_item.values() if o is not rs}
        assert all(r["prompt"].startswith(f"Passage: {r['context']}") for r in rs.values() if r["context"])
    assert build_rows(_records(), items=12, seed=0)[0] == rows
    assert {r["item_id"] for r in build_rows(_records(), items=12, seed=1)[0]} != set(by_item)


def test_the_first_original_answer_is_gold_and_the_others_aliases():
    records = [(1, {"question": "who wrote it", "org_context": "<P> It was written by Ann Lee , a poet . </P>",
                    "org_answer": ["Ann Lee", "Lee", "Ann Lee"], "sub_context": "<P> It was written by Bo Day . </P>",
                    "sub_answer": ["Bo Day"]}),
               (2, {"question": "where is it", "org_context": "<P> It is in Oslo . </P>", "org_answer": ["Oslo"],
                    "sub_context": "<P> It is in Rome . </P>", "sub_answer": ["Rome"]})]
    rows, _ = build_rows(records, items=2, seed=0)
    who = next(r for r in rows if r["question"] == "Who wrote it?" and r["condition"] == "correct")
    assert (who["gold"], who["gold_aliases"], who["wrong_value"]) == ("Ann Lee", ["Lee"], "Bo Day")
    assert who["context"] == "It was written by Ann Lee, a poet."
    assert clean_passage("<Td> `` Love '' </Td> Blood - Horse ( 1 )") == '"Love" Blood-Horse (1)'


def _lengths(rows: list[dict]) -> dict[str, tuple[int, str]]:
    """``{item_id: (passage words, question)}``: an item's length is its longer passage (original or substituted)."""
    return {r["item_id"]: (max(x["context_words"] for x in rows if x["item_id"] == r["item_id"] and
                               x["condition"] in ("correct", "misleading")), r["question"]) for r in rows}


def test_a_length_cap_drops_long_passages_and_stratifies_the_sample():
    rows, stats = build_rows(_records(), items=10, seed=0, max_context_words=60)
    assert stats["stratified_by_length"] and stats["drops"]["passage_over_max_context_words"] > 0
    assert all(r["context_words"] <= 60 for r in rows if r["condition"] != "irrelevant")
    pool = sorted(_lengths(build_rows(_records(), items=None, seed=0, max_context_words=60)[0]).items(),
                  key=lambda kv: kv[1])
    chosen = set(_lengths(rows))
    assert chosen <= {i for i, _ in pool} and len(pool) == stats["kept_questions"] > 10
    for b in range(4):  # each quarter of the kept questions, by length, gives its share of the 10
        part = pool[len(pool) * b // 4: len(pool) * (b + 1) // 4]
        share = 10 * len(part) / len(pool)
        assert int(share) <= sum(i in chosen for i, _ in part) <= int(share) + 1
    assert not build_rows(_records(), items=10, seed=0)[1]["stratified_by_length"]


def test_zip_and_jsonl_give_the_same_rows(tmp_path):
    z = tmp_path / "nqswap.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.write(SAMPLE_PATH, "nqswap/merged.jsonl")
    records, label = read_source(z)
    assert label.endswith("nqswap.zip:nqswap/merged.jsonl")
    assert build_rows(records, items=8, seed=3)[0] == build_rows(_records(), items=8, seed=3)[0]


def test_a_hub_id_is_read_with_datasets_at_the_pinned_revision(monkeypatch):
    import datasets

    calls = []
    monkeypatch.setattr(datasets, "load_dataset", lambda name, **kw: calls.append((name, kw)) or [
        {k: v for k, v in rec.items()} for _, rec in _records()[:3]])
    records, label = read_source("pminervini/NQ-Swap")
    assert calls == [("pminervini/NQ-Swap", {"split": HUB_SPLIT, "revision": HUB_REVISION})] and len(records) == 3
    read_source("pminervini/NQ-Swap@abc123")
    assert calls[-1][1]["revision"] == "abc123"
    with pytest.raises(DataError, match="does not exist"):
        read_source("runs/missing.jsonl")  # a missing local file is not taken for a Hub id


@pytest.mark.parametrize("bad, field", [({"org_answer": []}, "org_answer"), ({"sub_answer": [""]}, "sub_answer"),
                                        ({"question": None}, "question"), ({"sub_context": 3}, "sub_context")])
def test_bad_input_is_one_line_naming_file_line_and_field(tmp_path, capsys, bad, field):
    lines = SAMPLE_PATH.read_text().splitlines()[:4]
    rec = {**json.loads(lines[2]), **bad}
    src = tmp_path / "merged.jsonl"
    src.write_text("\n".join([*lines[:2], json.dumps(rec), lines[3]]) + "\n")
    out = tmp_path / "rows.jsonl"
    assert cli(["build-nq-swap", "--data", str(src), "--out", str(out), "--items", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{src}, line 3, field '{field}'" in err and not out.exists()


def test_a_malformed_zip_member_line_is_named(tmp_path, capsys):
    z = tmp_path / "nqswap.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("nqswap/merged.jsonl", SAMPLE_PATH.read_text().splitlines()[0] + "\n{oops\n")
    assert cli(["build-nq-swap", "--data", str(z), "--out", str(tmp_path / "r.jsonl")]) == 2
    assert "nqswap.zip:nqswap/merged.jsonl, line 2" in capsys.readouterr().err


# -- the metrics, by hand --------------------------------------------------------------------------------
def _four_items():
    """Four items of the sample and responses: under the substituted passage A names the substitute, B the
    original, C both, D neither; closed-book A and B are right (known), C and D wrong (unknown); with the original
    passage A, B and D name the original (A in so many words, B in a sentence), C the substitute."""
    rows, _ = build_rows(_records(), items=4, seed=0)
    ids = list(dict.fromkeys(r["item_id"] for r in rows))
    g = {r["item_id"]: (r["gold"], r["wrong_value"]) for r in rows}
    said = {  # item -> condition -> response
        ids[0]: {"clean": g[ids[0]][0], "misleading": g[ids[0]][1], "correct": g[ids[0]][0]},
        ids[1]: {"clean": g[ids[1]][0], "misleading": f"It is {g[ids[1]][0]}.",
                 "correct": f"The answer must be {g[ids[1]][0]}, as the passage says"},
        ids[2]: {"clean": "No idea.", "misleading": f"{g[ids[2]][0]} or {g[ids[2]][1]}", "correct": g[ids[2]][1]},
        ids[3]: {"clean": "I don't know.", "misleading": "Something else entirely.", "correct": g[ids[3]][0]},
    }
    responses = {r["row_id"] if "row_id" in r else f"{r['item_id']}/{r['condition']}":
                 said[r["item_id"]].get(r["condition"], "Something else entirely.") for r in rows}
    return rows, responses


def _score(rows, responses, tmp_path, family="nq_swap"):
    fam = get_family(family)
    loaded = fam.expand_records(list(enumerate(rows, start=1)), "rows")
    return fam.score_responses(loaded, responses, tmp_path / "out", n_boot=50)


def test_nq_swap_metrics_match_hand_computed_values(tmp_path):
    rows, responses = _four_items()
    nq = _score(rows, responses, tmp_path)["nq_swap"]
    assert (nq["p_sub"], nq["p_org"], nq["p_both"], nq["p_neither"]) == (0.25, 0.25, 0.25, 0.25)
    assert nq["memorization_ratio"] == 0.5 and nq["em_org_context"] == 0.75
    assert nq["em_org_context_strict"] == 0.5  # B's sentence names the answer but is not it
    known, unknown = nq["by_knowledge"]["known"], nq["by_knowledge"]["unknown"]
    assert (known["n_items"], known["p_sub"], known["p_org"], known["memorization_ratio"]) == (2, 0.5, 0.5, 0.5)
    assert (unknown["n_items"], unknown["p_sub"], unknown["p_org"], unknown["p_both"]) == (2, 0.0, 0.0, 0.5)
    assert unknown["memorization_ratio"] is None and unknown["em_org_context"] == 0.5
    assert nq["knowledge_source"].startswith("this run's own clean row")


def test_knowledge_labels_on_the_rows_decide_known_and_unknown(tmp_path):
    rows, responses = _four_items()
    ids = list(dict.fromkeys(r["item_id"] for r in rows))
    labels = {ids[0]: "unknown", ids[1]: "unknown", ids[2]: "known", ids[3]: "uncertain"}
    nq = _score([{**r, "knowledge": labels[r["item_id"]]} for r in rows], responses, tmp_path)["nq_swap"]
    assert nq["knowledge_source"].startswith("the rows' knowledge labels")
    assert {k: v["n_items"] for k, v in nq["by_knowledge"].items()} == {"known": 1, "unknown": 2, "uncertain": 1}
    assert nq["by_knowledge"]["unknown"]["memorization_ratio"] == 0.5 and nq["by_knowledge"]["known"]["p_both"] == 1


# -- end to end ------------------------------------------------------------------------------------------
def test_build_then_score_saved_responses_end_to_end(tmp_path, capsys):
    rows_path, resp_path, out = tmp_path / "rows.jsonl", tmp_path / "responses.jsonl", tmp_path / "out"
    assert cli(["build-nq-swap", "--data", str(SAMPLE_PATH), "--out", str(rows_path), "--items", "4", "--seed", "0"]) \
        == 0
    built = [json.loads(x) for x in rows_path.read_text().splitlines()]
    rows, responses = _four_items()
    assert built == rows
    resp_path.write_text("".join(json.dumps({"row_id": k, "response": v}) + "\n" for k, v in responses.items()))
    assert cli(["score", "--family", "nq_swap", "--rows", str(rows_path), "--responses", str(resp_path), "--out",
                str(out), "--n-boot", "50"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["family"] == "nq_swap" and m["accuracy"]["misleading"] == 0.25 and m["sc2w"] == 0.5
    assert m["nq_swap"]["memorization_ratio"] == 0.5 and m["nq_swap"]["ci"]["p_sub"] is not None
    report = (out / "report.md").read_text()
    assert "### NQ-Swap" in report and "![nq_swap.png](nq_swap.png)" in report
    assert (out / "nq_swap.png").stat().st_size > 0 and (out / "mist_accuracy.png").stat().st_size > 0
    flat = get_family("nq_swap").headline(m)
    assert flat["nq_swap.p_sub"] == 0.25 and flat["nq_swap.known.p_org"] == 0.5 and flat["sc2w"] == 0.5
    # MIST reads the same rows (open_answer is one of its answer types), without NQ-Swap's metrics
    assert cli(["score", "--family", "mist", "--rows", str(rows_path), "--responses", str(resp_path), "--out",
                str(tmp_path / "mist"), "--n-boot", "0"]) == 0
    assert "nq_swap" not in json.loads((tmp_path / "mist" / "metrics.json").read_text())


def test_the_recipe_evaluates_the_shipped_sample_on_the_tiny_model(tmp_path, monkeypatch):
    from recipe_utils import compose
    from recipes.evaluate import run

    monkeypatch.chdir(ROOT)
    m = run(compose("evaluate", ["eval=nq_swap", "model.path=tiny", "eval.nq_swap.questions=3",
                                 f"out_dir={tmp_path / 'run'}"]))
    assert m["family"] == "nq_swap" and m["n_items"] == 3 and m["nq_swap"]["n_items"] == 3
    assert (tmp_path / "run" / "nq_swap.png").is_file()
    with pytest.raises(ValueError, match="eval.nq_swap.questions must be >= 2"):
        run(compose("evaluate", ["eval=nq_swap", "model.path=tiny", "eval.nq_swap.questions=1",
                                 f"out_dir={tmp_path / 'bad'}"]))


# -- the judge on real responses -------------------------------------------------------------------------
REAL = ROOT / "tests" / "data" / "smollm2_nq_swap_outputs.jsonl"


def _reading(rec: dict) -> str:
    """``org`` | ``sub`` | ``both`` | ``none`` | ``other``: which answer the judge reads in a response."""
    row = {**rec, "answer_type": "open_answer"}
    parsed = parse_row_answer(rec["response"], row)
    status = answer_status(parsed, row, rec["response"])
    if status in ("multiple", "no_answer"):
        return {"multiple": "both", "no_answer": "none"}[status]
    return "org" if row_answer_matches(parsed, row) else "sub" if row_answer_matches(parsed, row, "wrong_value") \
        else "other"


def test_the_judge_on_160_real_smollm2_responses_read_by_hand():
    """160 greedy SmolLM2-135M-Instruct responses to 40 NQ-Swap questions under the four conditions (passages of at
    most 150 words, 32 new tokens), each read by hand (``human``); the judge agrees on all but the six recorded in
    docs/nq_swap.md#the-judge (``judge_disagrees``, with a note saying why)."""
    recs = [json.loads(x) for x in REAL.read_text(encoding="utf-8").splitlines()]
    assert len(recs) == 160 and {r["human"] for r in recs} == {"org", "sub", "other"}
    wrong = [(r["row_id"], r["human"], _reading(r)) for r in recs
             if (_reading(r) != r["human"]) != r["judge_disagrees"]]
    assert not wrong
    assert sum(r["judge_disagrees"] for r in recs) == 6 and all(r["note"] for r in recs if r["judge_disagrees"])


def test_a_condition_without_a_context_is_a_clear_error(monkeypatch):
    """A condition added to the vocabulary but not to the builder's contexts names the builder (was a KeyError)."""
    from selectrust import conditions

    monkeypatch.setattr(conditions, "MIST_CONDITIONS", (*conditions.MIST_CONDITIONS, "contradicting"))
    with pytest.raises(ValueError, match=r"eval_hooks/families/nq_swap/items.py gives no context for .*contradicting"):
        build_rows(_records(), items=2, seed=0)
