"""Knowledgeable-R1's paired rollouts (trainer/rl/paired_rollouts.py, algo.rollout_mode=paired_context): the
no-context prompt of real facts and NQ-Swap rows, the row checks, both groups of each row through the rollout source
(scripted backend), their advantages against the pure function, resume, the config checks, and one GRPO run."""

import json
import math

import pytest
import torch

from selectrust.core.io import DataError
from selectrust.generation.backends.base import derive_seed
from selectrust.generation.prompts import PromptSettings, render_prompt
from tests.box2_fakes import ScriptedBackend, assert_same_microbatches
from trainer.algos.choices import ROLLOUT_MODES
from trainer.algos.paired_context import paired_context_advantages
from trainer.config import GRPOAlgoConfig
from trainer.data.train_data import ShuffleSampler
from trainer.rl.paired_rollouts import NO_CONTEXT, PairedContextMode, check_paired_rows, no_context_prompt
from trainer.rl.rewards import GuardedReward, resolve_reward
from trainer.rl.rollout import RolloutSettings, RolloutSource, prompt_seed
from trainer.rl.modes import MODES
from trainer.rl.rollout_modes import SingleTurnMode

G = 4


# ---- the prompt without its context ----------------------------------------------------------------------------
def test_the_no_context_prompt_of_facts_and_nq_swap_rows_is_their_clean_prompt():
    from eval_hooks.builders.facts.wording import item_rows
    from eval_hooks.builders.nq_swap import SAMPLE_PATH, build_rows, read_source

    item = {"id": "f1", "subject": "Peru", "gold": "Lima", "wrong_value": "Quito", "relation": "capital",
            "group": "south_america", "aliases": []}
    other = {"subject": "Chile", "gold": "Santiago"}
    facts = item_rows(item, other, "What is the capital of {s}?", "the capital of {s} is {o}", 0, "train")
    nq, _ = build_rows(read_source(SAMPLE_PATH)[0], items=3, seed=0)
    for rows in (facts, nq):
        clean = {r["item_id"]: r["prompt"] for r in rows if r["condition"] == "clean"}
        with_context = [r for r in rows if r["context"]]
        assert len(with_context) == 3 * len(clean) > 0
        for r in with_context:
            assert r["context"] in r["prompt"]
            assert no_context_prompt(r["prompt"], r["context"]) == clean[r["item_id"]], r["condition"]


def test_the_no_context_prompt_of_a_context_inside_or_at_the_end():
    assert no_context_prompt("Read this.\n\nNote: Lima is far.\n\nQ: capital?", "Lima is far.") == "Read this.\n\nQ: capital?"
    assert no_context_prompt("Q: capital?\n\nContext: Lima.", "Lima.") == "Q: capital?"
    for prompt, context, words in (("Q: capital?", "Lima", "does not hold"), ("Lima.", "Lima.", "nothing is left"),
                                   ("Q: capital?", "  ", "does not hold")):
        with pytest.raises(ValueError, match=words):
            no_context_prompt(prompt, context)


def test_rows_without_a_usable_context_fail_in_one_line():
    good = {"item_id": "a", "prompt": "Key: 1.\n\nQuestion: key?", "context": "Key: 1."}
    check_paired_rows([good])
    for bad, field, words in (({"condition": "clean", "context": None}, "context", "condition 'clean'.* has no context"),
                              ({"context": "Key: 2."}, "context", "the prompt does not hold the context"),
                              ({"prompt": [{"role": "user", "content": "Key: 1."}]}, "prompt", "chat messages")):
        row = {**good, **bad, "_path": "p.jsonl", "_line": 3}
        with pytest.raises(DataError, match=f"p.jsonl, line 3, field '{field}': algo.rollout_mode=paired_context.*"
                                            f"{words}") as e:
            check_paired_rows([good, row])
        assert "\n" not in str(e.value)


# ---- the mode through the rollout source (scripted backend) ------------------------------------------------------
ROWS = [{"item_id": f"i{k}", "context": f"Answer key: {k}.", "prompt": f"Answer key: {k}.\n\nQuestion: key k{k}?",
         "gold": k, "answer_type": "numeric"} for k in range(1, 7)]


def _script(request, j, seed):
    """Odd keys: right twice with the context, once without; even keys (the context misleads): once with it, three
    times without."""
    content = request.messages[-1]["content"]
    gold = int(content[content.index("key k") + 5])
    right = (2 if "Answer key" in content else 1) if gold % 2 else (1 if "Answer key" in content else 3)
    return str(gold) if j < right else "x"


def _source(tokenizer, *, num_iterations=1, old=None, std_scaling="group"):
    s = RolloutSettings.from_config(GRPOAlgoConfig(group_size=G, num_iterations=num_iterations, max_new_tokens=4,
                                                   std_scaling=std_scaling, max_refill_rounds=2),
                                    num_groups=2, grad_accum=2, prompt_settings=PromptSettings(), seed=0)
    backend = ScriptedBackend(tokenizer, _script)
    mode = PairedContextMode(s, tokenizer, GuardedReward(resolve_reward("numeric_match")))
    src = RolloutSource(ROWS, ShuffleSampler(len(ROWS), seed=0), mode, settings=s, backend_factory=lambda: backend,
                        old_logps_fn=old)
    return src, backend


def _unpadded(mb, i):
    n = int(mb["attention_mask"][i].sum())
    return mb["input_ids"][i, :n].tolist(), mb["completion_mask"][i, :n].tolist()


def test_each_row_yields_a_group_with_and_a_group_without_its_context(tiny_tokenizer):
    src, backend = _source(tiny_tokenizer)
    mbs = [src.next_microbatch(), src.next_microbatch()]
    m = src.pop_metrics()
    # two requests per row: its prompt with the context, then the same question without it, each of G samples
    assert len(backend.requests) == 4 and all(r.n == G for r in backend.requests)
    for k in range(2):
        with_ctx, without = backend.requests[2 * k], backend.requests[2 * k + 1]
        row = next(r for r in ROWS if r["prompt"] == with_ctx.messages[-1]["content"])
        assert without.messages[-1]["content"] == row["prompt"].split("\n\n")[1]
        assert row["context"] not in without.messages[-1]["content"]
        assert (with_ctx.seed, without.seed) == (prompt_seed(0, 0, 0, k), derive_seed("no_context", prompt_seed(0, 0, 0, k)))
    # 2 prompts x 3G rows, in groups of [CK x G, RPK x G, PK x G]
    rows = [(mb, i) for mb in mbs for i in range(mb["input_ids"].shape[0])]
    assert len(rows) == 2 * 3 * G
    for g in range(2):
        item = mbs[g]["item_ids"][0]
        row = next(r for r in ROWS if r["item_id"] == item)
        p_with = render_prompt(tiny_tokenizer, row["prompt"], PromptSettings())
        p_without = render_prompt(tiny_tokenizer, no_context_prompt(row["prompt"], row["context"]), PromptSettings())
        group = rows[g * 3 * G:(g + 1) * 3 * G]
        ids = [(mb["item_ids"][i], *_unpadded(mb, i)) for mb, i in group]
        assert [x[0] for x in ids] == [item] * 2 * G + [item + NO_CONTEXT] * G
        for name, (_, tok, mask) in zip(["ck"] * G + ["rpk"] * G + ["pk"] * G, ids):
            prompt = p_without if name == "pk" else p_with
            assert tok[:len(prompt)] == prompt and mask == [0] * len(prompt) + [1] * (len(tok) - len(prompt))
        assert row["context"] not in tiny_tokenizer.decode(p_without)
        # an RPK row is the PK completion after the prompt with the context
        for (_, rpk, _), (_, pk, _) in zip(ids[G:2 * G], ids[2 * G:]):
            assert rpk[len(p_with):] == pk[len(p_without):]
        # their rollout log-probs: the backend's for CK and PK rows, NaN (weight 1) for the RPK rows
        mb = mbs[g]
        lp = [mb["rollout_logps"][i][mb["completion_mask"][i].bool()] for i in range(3 * G)]
        assert all(bool((x == -1.0).all()) for x in lp[:G] + lp[2 * G:]) and all(bool(x.isnan().all()) for x in lp[G:2 * G])
    assert {"paired/beta", "paired/reward_with", "paired/reward_without", "paired/context_helps_frac"} <= set(m)
    assert m["rollout/judged"] == 2 * 2 * G  # the RPK rows are not judged again


@pytest.mark.parametrize("std_scaling", ["group", "batch"])
def test_the_advantages_are_the_pure_functions(tiny_tokenizer, std_scaling):
    src, _ = _source(tiny_tokenizer, std_scaling=std_scaling)
    mbs = [src.next_microbatch(), src.next_microbatch()]
    m = src.pop_metrics()
    rewards = torch.tensor([x.reward for x in src._batch["samples"]]).view(2, 3, G)
    assert torch.equal(rewards[:, 1], rewards[:, 2])  # an RPK row carries its PK completion's reward
    w, wo = rewards[:, 0], rewards[:, 2]
    assert {tuple(x) for x in w.tolist()} | {tuple(x) for x in wo.tolist()} <= {(1, 1, 0, 0), (1, 0, 0, 0), (1, 1, 1, 0)}
    adv_with, adv_without, adv_cross, want = paired_context_advantages(w, wo, std_scaling=std_scaling)
    got = torch.cat([mb["advantages"] for mb in mbs]).view(2, 3, G)
    torch.testing.assert_close(got[:, 0], adv_with)
    torch.testing.assert_close(got[:, 1], adv_cross)
    torch.testing.assert_close(got[:, 2], adv_without)
    assert all(m[f"paired/{k}"] == pytest.approx(float(v)) for k, v in want.items())


def test_resume_mid_batch_and_at_the_boundary(tiny_tokenizer):
    def old(ids, att, cm):
        return (ids.float() * -0.01) * cm

    a, _ = _source(tiny_tokenizer, num_iterations=2, old=old)
    [a.next_microbatch() for _ in range(3)]
    state = json.loads(json.dumps(a.state_dict()))  # NaN rollout log-probs survive the JSON checkpoint
    assert state["batch"] is not None and any(math.isnan(v) for x in state["batch"]["samples"]
                                              for v in (x["rollout_logps"] or []))
    rest_a = [a.next_microbatch() for _ in range(3)]
    b, backend_b = _source(tiny_tokenizer, num_iterations=2, old=old)
    b.load_state_dict(state)
    rest_b = [b.next_microbatch() for _ in range(3)]
    assert_same_microbatches(rest_a, rest_b)
    assert [x["item_ids"] for x in rest_a] == [y["item_ids"] for y in rest_b]
    assert backend_b.requests[0].seed == prompt_seed(0, 1, 0, 0)  # only the next rollout batch was generated
    c, _ = _source(tiny_tokenizer)
    c.next_microbatch(); c.next_microbatch()
    state = c.state_dict()
    nxt = c.next_microbatch()
    d, _ = _source(tiny_tokenizer)
    d.load_state_dict(state)
    assert torch.equal(d.next_microbatch()["input_ids"], nxt["input_ids"])


def test_shared_prompt_packs_the_two_prompts_without_a_fallback(tiny_tokenizer):
    src, _ = _source(tiny_tokenizer)
    src.next_microbatch()
    m = src.pop_metrics()
    assert m["shared_prompt_fallback_groups"] == 0 and 0 < m["prompt_token_fraction_saved"] < 1


# ---- config and the recipe ------------------------------------------------------------------------------------------
def test_config_checks_fail_in_one_line():
    from tests.recipe_utils import compose
    from selectrust.core.errors import ConfigError
    from trainer.config import validate_grpo

    paired = ["recipe=grpo_tiny", "algo.rollout_mode=paired_context"]
    validate_grpo(compose("grpo", [*paired, "optim.batch_size=48"]), world=1)  # 4 prompts x 4 samples x 3 rows
    single = ["recipe=grpo_tiny", "algo.group_size=16", "algo.prompts_per_step=3000", "algo.oversample_cap=1"]
    validate_grpo(compose("grpo", single))  # 48000 completions a round: within the bound, paired twice that is not
    for over, words in ((["optim.batch_size=16"], r"algo.rollout_mode=paired_context: rows per sample\) = 4 \* 4 \* 3 = "
                                                  r"48 samples per step must equal optim.batch_size"),
                        (["recipe=grpo_env_tiny", "algo.rollout_mode=paired_context"], "algo.env='toy_lookup' runs"),
                        ([*single, "algo.rollout_mode=paired_context"],
                         r"96000 completions .* x 2 \(algo.rollout_mode=paired_context\)\), over the limit")):
        with pytest.raises(ConfigError, match=words) as e:
            validate_grpo(compose("grpo", [*paired, *over]), world=1 if over == ["optim.batch_size=16"] else None)
        assert "\n" not in str(e.value)
    with pytest.raises(Exception, match="rollout_mode"):
        compose("grpo", ["recipe=grpo_tiny", "algo.rollout_mode=paired"])


def test_grpo_trains_with_paired_rollouts_end_to_end(tmp_path):
    from tests.recipes.test_grpo_recipe import _metrics, _run

    rows = [{"item_id": f"i{k}", "context": f"Answer key: {k}.", "prompt": f"Answer key: {k}.\n\nQuestion: key k{k}?",
             "gold": k, "answer_type": "numeric"} for k in range(1, 7)]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    small = ["eval=none", f"data.train_path={data}", "algo.group_size=4", "algo.prompts_per_step=2",
             "algo.max_new_tokens=3", "algo.rollout_mode=paired_context"]
    run = tmp_path / "grpo"
    p = _run(run, *small, "optim.batch_size=24", "trainer.max_steps=2", "algo.reward=tests.box2_fakes:distinct_chars_parity")
    assert p.returncode == 0, p.stderr[-3000:]
    lines = _metrics(run)
    assert [l["step"] for l in lines] == [1, 2]
    assert all(0.01 <= l["paired/beta"] <= 1.0 and "paired/reward_without" in l for l in lines)
    assert (run / "final" / "adapter_model.safetensors").exists()
    # a row without a context stops the run before any model loads, in one line naming the field
    data.write_text(json.dumps({**rows[0], "context": None}) + "\n")
    p = _run(tmp_path / "bad", *small, "optim.batch_size=24")
    assert p.returncode == 2 and "line 1, field 'context': algo.rollout_mode=paired_context" in p.stderr
    assert not (tmp_path / "bad" / "metrics.jsonl").exists()


def test_the_rollout_mode_registry_holds_the_configs_names():
    """``algo.rollout_mode`` picks a class from ``trainer.rl.rollout_modes.MODES`` (no if/elif in the recipe); the
    config's torch-free choice names the same modes, in the same order."""
    assert tuple(MODES) == ROLLOUT_MODES
    assert MODES.get("single_turn") is SingleTurnMode and MODES.get("paired_context") is PairedContextMode
    SingleTurnMode.check_rows([{"prompt": "no context here"}])  # any row will do
    with pytest.raises(DataError):
        PairedContextMode.check_rows([{"item_id": "a", "prompt": "no context here"}])


# ---- issue 59 WEAK: the suggestion fits the rows, and the paragraph rule is said -----------------------------------
def test_rows_none_of_which_has_a_context_are_not_told_to_pick_conditions():
    """The toy GRPO prompts carry no context at all: ``data.train_conditions=[...]`` cannot help them."""
    rows = [{"item_id": f"toy{k}", "prompt": f"Fix step {k}.", "_path": "p.jsonl", "_line": k} for k in (1, 2)]
    with pytest.raises(DataError) as e:
        check_paired_rows(rows)
    msg = str(e.value)
    assert "train_conditions" not in msg and "none of the 2 rows has a context" in msg, msg
    assert "algo.rollout_mode=single_turn" in msg and "data.train_family" in msg, msg


def test_family_rows_some_with_a_context_are_told_the_conditions_that_have_one():
    good = {"item_id": "a", "prompt": "Key: 1.\n\nQuestion: key?", "context": "Key: 1."}
    rows = [{**good, "condition": "misleading"}, {**good, "item_id": "b", "condition": "correct"},
            {**good, "item_id": "c", "condition": "clean", "context": None}]
    with pytest.raises(DataError, match=r"data\.train_conditions=\[correct,misleading\]") as e:
        check_paired_rows(rows)
    assert "clean" not in str(e.value).split("train_conditions=")[1], str(e.value)


def test_a_context_that_is_no_paragraph_of_its_own_is_told_the_rule():
    row = {"item_id": "a", "prompt": "Passage: Key 1. Question: key?", "context": "Key 1.", "_path": "p.jsonl",
           "_line": 1}
    with pytest.raises(DataError, match=r"nothing is left of the prompt without its context.*a paragraph of its own"
                                        r".*blank line"):
        check_paired_rows([row])


def test_the_help_of_rollout_mode_says_the_paragraph_rule():
    from trainer.config.cli_help import render_help

    text = " ".join(render_help("grpo").split())
    assert "a paragraph of its own" in text and "blank line" in text
