"""Family loaders: validation on load (errors name file, line, field) and expansion into rows."""

import json
from pathlib import Path

import pytest

from eval_hooks import FAMILIES, DataError, load_rows
from selectrust.core.io import read_records, write_jsonl_atomic

DATA = Path(__file__).parents[2] / "data" / "eval"


def records(name):
    return [json.loads(l) for l in open(DATA / name)]


def write(tmp_path, recs, name="items.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return p


def assert_error(excinfo, path, line, field):
    e = excinfo.value
    assert e.path == str(path) and e.line == line and e.field == field, str(e)
    msg = str(e)
    assert str(path) in msg and f"line {line}" in msg and f"'{field}'" in msg and "accepted" in msg


# -- reading --------------------------------------------------------------------------------------------

def test_malformed_json_line_names_file_and_line(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"a": 1}\n\n{"a": 2,}\n')
    with pytest.raises(DataError) as ei:
        read_records(p)
    assert ei.value.line == 3 and str(p) in str(ei.value) and "malformed JSON" in str(ei.value)


@pytest.mark.parametrize("content", ["", "\n  \n"])
def test_empty_file_is_an_error(tmp_path, content):
    p = tmp_path / "empty.jsonl"
    p.write_text(content)
    with pytest.raises(DataError, match="no records"):
        load_rows("mist", p)


def test_non_object_line_and_missing_file(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text("[1, 2]\n")
    with pytest.raises(DataError, match="expected a JSON object"):
        read_records(p)
    with pytest.raises(DataError, match="does not exist"):
        read_records(tmp_path / "nope.jsonl")


def test_unknown_family():
    with pytest.raises(DataError, match="mist \\| box2 \\| taste \\| med"):
        load_rows("scope", DATA / "mist_small.jsonl")


# -- MIST -----------------------------------------------------------------------------------------------

def test_mist_loads_quartets_with_extras():
    rows = load_rows("mist", DATA / "mist_small.jsonl")
    assert len(rows) == 12
    assert [r["row_id"] for r in rows[:4]] == ["m1/clean", "m1/misleading", "m1/correct", "m1/irrelevant"]
    r = rows[5]
    assert r["condition"] == "misleading" and r["answer_type"] == "multiple_choice" and r["gold"] == "B"
    assert r["topic"] == "science" and r["channel"] == "lecture_note" and r["plausibility"] == "related_entity"


@pytest.mark.parametrize("mutate, line, field, match", [
    (lambda rs: rs.pop(1), 1, "condition", "lacks condition\\(s\\) misleading"),
    (lambda rs: rs.__setitem__(2, {**rs[2], "condition": "misleading"}), 3, "condition", "duplicate condition"),
    (lambda rs: rs.__setitem__(3, {**rs[3], "gold": "17"}), 4, "gold", "disagrees"),
    (lambda rs: rs.__setitem__(2, {**rs[2], "wrong_value": "15"}), 3, "wrong_value", "disagrees"),
    (lambda rs: rs.__setitem__(1, {**rs[1], "question": "other"}), 2, "question", "disagrees"),
    (lambda rs: rs.__setitem__(0, {**rs[0], "answer_type": "essay"}), 1, "answer_type", "unknown value"),
    (lambda rs: rs.__setitem__(0, {**rs[0], "condition": "noisy"}), 1, "condition", "unknown value"),
    (lambda rs: rs.__setitem__(0, {**rs[0], "gold": "eighteen"}), 1, "gold", "not a valid numeric"),
    # int golds of more digits than parse back (MAX_DIGITS): compared as canonical strings, not a crash
    (lambda rs: [r.update(gold=int("1" * 70), wrong_value=int("1" * 70)) for r in rs[:4]], 1, "wrong_value",
     "equals the gold"),
    (lambda rs: [r.__setitem__("wrong_value", "18.0") for r in rs[:4]], 1, "wrong_value", "equals the gold"),
    (lambda rs: rs[0].pop("prompt"), 1, "prompt", "missing"),
    (lambda rs: rs.__setitem__(5, {**rs[5], "gold": "E"}), 6, "gold", "multiple_choice"),
])
def test_mist_bad_input(tmp_path, mutate, line, field, match):
    rs = records("mist_small.jsonl")
    mutate(rs)
    p = write(tmp_path, rs)
    with pytest.raises(DataError, match=match) as ei:
        load_rows("mist", p)
    assert_error(ei, p, line, field)


def _short_text_quartet(**fields):
    conds = ("clean", "misleading", "correct", "irrelevant")
    return [{"item_id": "k1", "condition": c, "prompt": f"Where? ({c})", "answer_type": "short_text", "gold": "Kyiv",
             "wrong_value": "Lviv", **fields} for c in conds]


@pytest.mark.parametrize("fields, field, match", [
    # issue 33 WEAK: the alias "The" was accepted, then matched "It is the one in the west: Lviv."
    ({"gold_aliases": ["Kiev", "The"]}, "gold_aliases", "'The' is not a valid short_text answer.*stop word"),
    ({"gold_aliases": ["of"]}, "gold_aliases", "'of' is not a valid short_text answer"),
    ({"wrong_value": "A"}, "wrong_value", "'A' is not a valid short_text answer"),
    # issue 33 WEAK: an alias equal to the wrong value was reported as the gold being equal to it
    ({"gold_aliases": ["Kiev", "lviv"]}, "gold_aliases", "gold alias 'lviv' equals the wrong_value 'Lviv'"),
])
def test_mist_short_text_aliases_are_checked_when_the_data_loads(tmp_path, fields, field, match):
    p = write(tmp_path, _short_text_quartet(**fields))
    with pytest.raises(DataError, match=match) as ei:
        load_rows("mist", p)
    assert_error(ei, p, 1, field)
    assert "equals the gold" not in str(ei.value)
    assert len(load_rows("mist", write(tmp_path, _short_text_quartet(gold_aliases=["Kiev"])))) == 4


def test_mist_gold_formatting_differences_are_not_disagreements(tmp_path):
    rs = records("mist_small.jsonl")
    rs[1]["gold"], rs[2]["gold"] = "18.0", 18
    assert len(load_rows("mist", write(tmp_path, rs))) == 12


# -- Box2 -----------------------------------------------------------------------------------------------

def test_box2_expansion():
    rows = load_rows("box2", DATA / "box2_small.jsonl")
    item = records("box2_small.jsonl")[0]
    b1 = {r["condition"]: r for r in rows if r["item_id"] == "b1"}
    assert sorted(b1) == sorted(["none", "good", "bad", "partial_0", "partial_2", "mixed_0", "mixed_2"])
    good, bad = item["good_steps"], item["bad_continuations"]
    assert b1["none"]["workflow"] == [] and b1["good"]["workflow"] == good
    assert b1["bad"]["workflow"] == bad["0"]
    assert b1["partial_2"]["workflow"] == good[:2]
    assert b1["mixed_2"]["workflow"] == good[:2] + bad["2"]
    assert (b1["mixed_2"]["regime"], b1["mixed_2"]["k"]) == ("mixed", 2)
    assert (b1["good"]["regime"], b1["good"]["k"]) == ("good", None)
    # the prompt shows exactly the workflow steps, numbered
    assert "1. List the first 10 even numbers" in b1["mixed_2"]["prompt"]
    assert "3. Count the pairs: 10 pairs of 22." in b1["mixed_2"]["prompt"]
    assert "workflow" not in b1["none"]["prompt"].lower() and b1["none"]["prompt"] == b1["partial_0"]["prompt"]
    assert all(r["source"] == "toy" and r["task"] == item["task"] for r in b1.values())
    assert {r["condition"] for r in rows if r["item_id"] == "b2"} >= {"partial_1", "mixed_1"}


@pytest.mark.parametrize("mutate, field, match", [
    (lambda it: it["bad_continuations"].pop("0"), "bad_continuations", 'change point "0"'),
    (lambda it: it["bad_continuations"].__setitem__("9", ["x"]), "bad_continuations", "outside 0..4"),
    (lambda it: it["bad_continuations"].__setitem__("two", ["x"]), "bad_continuations", "not an integer"),
    (lambda it: it["bad_continuations"].__setitem__("2", []), "bad_continuations", "non-empty list"),
    (lambda it: it.__setitem__("good_steps", []), "good_steps", "list of strings"),
    (lambda it: it.__setitem__("answer_type", "free_text"), "answer_type", "unknown value"),
    (lambda it: it.__setitem__("prompt", "x"), "prompt", "collides"),
])
def test_box2_bad_input(tmp_path, mutate, field, match):
    rs = records("box2_small.jsonl")
    mutate(rs[0])
    p = write(tmp_path, rs)
    with pytest.raises(DataError, match=match) as ei:
        load_rows("box2", p)
    assert_error(ei, p, 1, field)


def test_duplicate_item_ids(tmp_path):
    for fam in ("box2", "taste", "med"):
        rs = records(f"{fam}_small.jsonl")
        p = write(tmp_path, rs + [rs[0]], name=f"{fam}.jsonl")
        with pytest.raises(DataError, match="duplicate item_id") as ei:
            load_rows(fam, p)
        assert_error(ei, p, len(rs) + 1, "item_id")


# -- Taste ----------------------------------------------------------------------------------------------

def test_taste_seeded_and_reversed():
    rows = load_rows("taste", DATA / "taste_small.jsonl")
    items = records("taste_small.jsonl")
    assert len(rows) == 2 * len(items)
    for it in items:
        s, r = [x for x in rows if x["item_id"] == it["item_id"]]
        assert (s["condition"], r["condition"]) == ("seeded", "reversed")
        assert s["gold"] == it["label"] and r["gold"] == ("A" if it["label"] == "B" else "B")
        a, b = it["candidate_a"], it["candidate_b"]
        assert s["prompt"].index("A: " + a) < s["prompt"].index("B: " + b)
        assert r["prompt"].index("A: " + b) < r["prompt"].index("B: " + a)
        assert s["prompt"].rstrip().endswith("where X is A or B.") and "ANSWER: X" in s["prompt"]
        assert s["construction"] == it["construction"] and s["domain"] == it["domain"]
        assert s["horizon"] == it["horizon"] and s["repo"] == it["repo"] and s["answer_type"] == "choice"


@pytest.mark.parametrize("field, value, match", [
    ("label", "C", "unknown value"), ("construction", "serial", "unknown value"),
    ("domain", "medicine", "unknown value"), ("candidate_b", "Rewrite the tokenizer from scratch using a new library.",
                                                "identical"),
    ("prefix", 5, "string or a list"),
])
def test_taste_bad_input(tmp_path, field, value, match):
    rs = records("taste_small.jsonl")
    rs[2][field] = value
    p = write(tmp_path, rs)
    with pytest.raises(DataError, match=match) as ei:
        load_rows("taste", p)
    assert_error(ei, p, 3, field)


# -- Med ------------------------------------------------------------------------------------------------

def test_med_expands_four_variants():
    rows = load_rows("med", DATA / "med_small.jsonl")
    assert len(rows) == 8
    nonce = {r["variant"]: r for r in rows if r["category"] == "nonce"}
    assert sorted(nonce) == sorted(["no_evd", "evd", "skept_evd", "expert_evd"])
    assert all(r["gold"] == "Lower" and r["answer_type"] == "label" for r in rows)  # "lower" normalised
    assert nonce["evd"]["condition"] == "nonce/evd" and nonce["evd"]["term_substituted"] == "flumbrotil"
    assert "flumbrotil reduced" in nonce["evd"]["prompt"] and "[2]" in nonce["evd"]["prompt"]
    assert "Evidence" not in nonce["no_evd"]["prompt"] and "RCT" not in nonce["no_evd"]["prompt"]
    assert "skeptical" in nonce["skept_evd"]["prompt"] and "Uncertain" in nonce["skept_evd"]["prompt"]
    assert "Cochrane" in nonce["expert_evd"]["prompt"] and "Cochrane" not in nonce["evd"]["prompt"]
    for r in rows:
        assert all(l in r["prompt"] for l in ("Higher", "Lower", "No Difference", "Uncertain", "ANSWER:"))
    assert nonce["evd"]["question_id"] == 7  # extra field kept


@pytest.mark.parametrize("field, value, match", [
    ("label", "Uncertain Effect", "unknown label"), ("category", "fake", "unknown value"),
    ("evidence", "one string", "list of strings"), ("term_substituted", "aspirin", "keeps the original term"),
    ("variants", ["evd", "evd"], "invalid variants"),
])
def test_med_bad_input(tmp_path, field, value, match):
    rs = records("med_small.jsonl")
    rs[1][field] = value
    p = write(tmp_path, rs)
    with pytest.raises(DataError, match=match) as ei:
        load_rows("med", p)
    assert_error(ei, p, 2, field)


def test_med_variant_subset(tmp_path):
    rs = records("med_small.jsonl")
    rs[0]["variants"] = ["evd"]
    rows = load_rows("med", write(tmp_path, rs))
    assert [r["condition"] for r in rows if r["item_id"] == "q7-original"] == ["original/evd"]


# -- rows files and Parquet -----------------------------------------------------------------------------

@pytest.mark.parametrize("family", ["mist", "box2", "taste", "med"])
def test_expanded_rows_load_back_unchanged(tmp_path, family):
    rows = load_rows(family, DATA / f"{family}_small.jsonl")
    p = tmp_path / "rows.jsonl"
    write_jsonl_atomic(p, rows)
    assert load_rows(family, p) == rows


def test_rows_file_duplicate_row_id(tmp_path):
    rows = load_rows("taste", DATA / "taste_small.jsonl")
    p = tmp_path / "rows.jsonl"
    write_jsonl_atomic(p, rows + [rows[1]])
    with pytest.raises(DataError, match="duplicate row_id") as ei:
        load_rows("taste", p)
    assert_error(ei, p, len(rows) + 1, "row_id")


@pytest.mark.parametrize("family", ["mist", "box2", "taste", "med"])
def test_parquet_matches_jsonl(tmp_path, family):
    import pyarrow as pa
    import pyarrow.parquet as pq

    recs = records(f"{family}_small.jsonl")
    for r in recs:  # an Arrow column has one type: Box2 golds 110 and "yes" become strings
        if "gold" in r:
            r["gold"] = str(r["gold"])
    p = tmp_path / f"{family}.parquet"
    keys = list(dict.fromkeys(k for r in recs for k in r))  # from_pylist would keep the first row's keys only
    pq.write_table(pa.Table.from_pydict({k: [r.get(k) for r in recs] for k in keys}), p)
    assert load_rows(family, p) == load_rows(family, write(tmp_path, recs))


def test_families_registry():
    assert sorted(FAMILIES) == ["box2", "med", "mist", "nq_swap", "taste"]
