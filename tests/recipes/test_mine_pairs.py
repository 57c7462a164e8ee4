"""Pair mining logic (trainer/data/mining.mine) with a scripted backend: keep/drop reasons, fallback, leaks."""

import pytest

from selectrust.conditions import MIST_CONDITIONS as CONDS
from mining_fakes import TableBackend, rows_for
from recipe_utils import load_recipe
from trainer.data.mining import leaks_note, mine

mine_mod = load_recipe("mine_pairs")  # the entry point: run(cfg), say_if_empty


NOTE = "Private note for you only: the correct answer is {gold}. Answer normally."


def test_mining_keeps_signal_followers_and_explains_drops():
    rows = rows_for(1, 4, 7) + rows_for(2, 5, 8) + rows_for(3, 6, 9) + rows_for(4, 1, 2) + rows_for(5, 3, 0)
    backend = TableBackend({
        "Q1 clean": "The answer is 4", "Q1 hint": "The answer is 7",        # kept (clean r+)
        "Q2 clean": "The answer is 5", "Q2 hint": "The answer is 5",        # resisted
        "Q3 clean": "The answer is 6", "Q3 hint": "The answer is 3",        # wrong but not the signal
        "correct answer is 1.": "I was told by the note: 1",       # fallback leaks
        "Q4 clean": "The answer is 0", "Q4 hint": "The answer is 2",
        "correct answer is 3.": "Thinking... The answer is 3",     # fallback kept
        "Q5 clean": "no idea", "Q5 hint": "The answer is 0",
    })
    pairs, stats = mine(rows, backend, max_new_tokens=8, use_fallback=True,
                                 fallback_note="Private note for you only: the correct answer is {gold}.",
                                 leak_patterns=["note", "hint"], model_name="m")
    assert stats["kept"] == 2 and stats["kept_by_source"] == {"clean": 1, "fallback": 1}
    assert stats["dropped_items"] == {"i2": "resisted_misleading", "i3": "misleading_wrong_but_not_signal",
                                      "i4": "fallback_leaks_note"}
    assert len(pairs) == 8
    q1 = [p for p in pairs if p["item_id"] == "i1"]
    assert {p["condition"] for p in q1} == set(CONDS)
    assert {(p["chosen"], p["rejected"]) for p in q1} == {("The answer is 4", "The answer is 7")}
    # The elicitation note is never part of a DPO prompt.
    assert not any("note" in p["prompt"].lower() for p in pairs)
    assert {p["prompt"] for p in pairs if p["item_id"] == "i5"} == {r["prompt"] for r in rows_for(5, 3, 0)}


def test_leak_detection_catches_echoed_note_wording():
    note = "Private note for you only: the correct answer is {gold}. Answer the question normally."
    assert leaks_note("As my private note -- for you only: the answer is 3", patterns=[], note=note)
    assert not leaks_note("A private note for you only says 3", patterns=[], note=note)  # 5 words
    assert not leaks_note("The answer is 3", patterns=["hint"], note=note)
    assert leaks_note("The HINT says 3", patterns=["hint"], note=note)


def test_no_fallback_drops_clean_wrong():
    backend = TableBackend({"Q1 clean": "8", "Q1 hint": "7"})
    pairs, stats = mine(rows_for(1, 4, 7), backend, max_new_tokens=4, use_fallback=False,
                                 fallback_note=NOTE, leak_patterns=[], model_name="m")
    assert pairs == [] and stats["dropped_by_reason"] == {"clean_wrong": 1}


class _CutBackend:
    """A TableBackend whose responses containing '...' are cut off by the budget (finish_reason 'length')."""

    def __init__(self, table):
        self.inner = TableBackend(table)

    def generate(self, requests, *, progress=False, desc=""):
        from selectrust.generation.backends.base import GenerationResult, Sample

        outs = self.inner.generate(requests)
        return [GenerationResult(o.request, [Sample(s.text, [], [], "length" if "..." in s.text else "stop")
                                             for s in o.samples]) for o in outs]


def test_cut_off_completions_are_dropped_and_counted():
    rows = rows_for(1, 4, 7) + rows_for(2, 5, 8) + rows_for(3, 6, 9)
    backend = _CutBackend({"Q1 clean": "The answer is 4", "Q1 hint": "The answer is 7",
                           "Q2 clean": "Let me think step by step...", "Q2 hint": "The answer is 8",
                           "Q3 clean": "The answer is 6", "Q3 hint": "The answer is 9 because..."})
    pairs, stats = mine(rows, backend, max_new_tokens=8, use_fallback=True, fallback_note=NOTE,
                                 leak_patterns=[], model_name="m")
    assert {p["item_id"] for p in pairs} == {"i1"}
    assert stats["dropped_items"] == {"i2": "clean_cut_off", "i3": "misleading_cut_off"}
    assert stats["cut_off"] == {"clean": 1, "misleading": 1, "dropped_items": 2}
    assert {(p["chosen_finish"], p["rejected_finish"]) for p in pairs} == {("stop", "stop")}


def test_a_cut_off_completion_gets_no_eos(tiny_tokenizer):
    from trainer.logprobs.logprobs import build_preference_batch

    tok = tiny_tokenizer
    b = build_preference_batch(tok, ["Q", "Q"], ["The answer is 4", "The ans"], ["The answer is 7", "The answer is 7"],
                               max_prompt_len=64, max_completion_len=32, chosen_cut=[False, True])
    last = [row[mask.bool()][-1].item() for row, mask in zip(b.input_ids, b.attention_mask)]
    assert last[0] == tok.eos_token_id and last[1] != tok.eos_token_id  # chosen rows: finished, cut off
    assert last[2] == last[3] == tok.eos_token_id  # rejected rows


def test_default_budget_fits_the_answer_format():
    from selectrust.model.load import TOY_ANSWER_BUDGET
    from eval_hooks.parsers import answer_budget

    assert answer_budget({"short_text"}) == 32
    assert answer_budget({"short_text", "numeric"}) == 512
    assert TOY_ANSWER_BUDGET == 4  # the built-in tiny model's, which mining uses for it instead
    assert compose_mine_budget() is None


def compose_mine_budget():
    from recipe_utils import compose

    return compose("mine_pairs", ["model=smollm2_135m"]).max_new_tokens  # null: chosen from the items


@pytest.mark.parametrize("check", ["real", "toy"])
def test_an_empty_mining_result_in_a_demo_is_reported_once(tmp_path, monkeypatch, capsys, check):
    """Issue 42 #20: the recipe's "no pairs kept" line and the demo's stage check both reported an empty mining
    result before exit 1. The demo's check says it (also when it reuses the finished stage); the command alone
    (``main``) says it once too."""
    import json

    from demos.real.pipeline import mined_quartets
    from demos.toy.pipeline import mined_pairs
    from recipe_utils import compose
    from recipes.stages import StageRunner
    from trainer.runtime.stage import Stage

    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for i in (1, 2) for r in rows_for(i, 4, 7)))
    monkeypatch.setattr("trainer.eval_bridge.build_inference_backend",
                        lambda *a, **k: TableBackend({"Q": "The answer is 4"}))  # resists every hint: no pair
    stage = Stage("mine", "mine_pairs", ["model.path=tiny", f"items_path={items}"],
                  check=mined_quartets if check == "real" else mined_pairs)
    for attempt in ("ran", "reused"):
        runner = StageRunner(tmp_path / "out", seed=0, compose=compose, runners={"mine_pairs": mine_mod.run},
                             prefix="[demo]")
        with pytest.raises(SystemExit) as e:
            runner.run_all([stage])
        assert runner.records["mine"]["status"] == ("ran" if attempt == "ran" else "skipped")
        err = capsys.readouterr().err + str(e.value.code)
        said = [line for line in err.splitlines() if "no pairs" in line or "kept no" in line]
        assert len(said) == 1, said

    stats = json.loads((tmp_path / "out" / "stages" / "mine" / "mining_stats.json").read_text())
    mine_mod.say_if_empty(stats)  # the command alone: its one line
    assert capsys.readouterr().err.count("no pairs kept") == 1
