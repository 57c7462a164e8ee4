"""GRPO's SFT term (CHORD, arXiv 2508.11408; algo.sft_coef): the pure term and its schedule (hand-computed values),
the rows it trains on (zero-variance failed groups, correct-context rows), their split over micro-batches and ranks,
the step's loss on the tiny model (coef 0 bit-identical to the GRPO loss, coef > 0 adds exactly the term), the config
checks, and the recipe end to end."""

from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
import torch

from selectrust.core.io import DataError
from selectrust.generation.prompts import PromptSettings
from tests.box2_fakes import ScriptedBackend
from trainer.algos.grpo import sft_coef_at, sft_term
from trainer.config import GRPOAlgoConfig
from trainer.data.train_data import ShuffleSampler
from trainer.rl.rewards import GuardedReward, resolve_reward
from trainer.rl.rollout import Group, Ranks, Rollout, RolloutSettings, RolloutSource
from trainer.rl.rollout_modes import SingleTurnMode
from trainer.rl.sft_rows import check_sft_rows, picked_items, sft_batch, sft_microbatch, target_text


# ---- the pure term ------------------------------------------------------------------------------------------------
def test_sft_term_hand_computed():
    logps = torch.tensor([[-1.0, -2.0, -9.0], [-3.0, -7.0, -7.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    loss, m = sft_term(logps, mask, coef=0.5)
    # NLL over the 3 masked tokens: (1 + 2 + 3) / 3 = 2; x 0.5 = 1
    assert loss.item() == pytest.approx(1.0) and m["nll"].item() == pytest.approx(2.0) and m["tokens"].item() == 3
    loss, m = sft_term(logps, mask, coef=0.5, num_tokens=6)  # the step's tokens spread over micro-batches
    assert loss.item() == pytest.approx(0.5) and m["nll"].item() == pytest.approx(1.0)
    g = logps.clone().requires_grad_(True)
    sft_term(g, mask, coef=0.5)[0].backward()
    torch.testing.assert_close(g.grad, -0.5 * mask / 3)  # masked positions only
    assert sft_term(logps, mask, coef=0.0)[0].item() == 0.0
    with pytest.raises(ValueError, match="must both be"):
        sft_term(logps, mask[:, :2], coef=1.0)
    with pytest.raises(ValueError, match="coef must be >= 0"):
        sft_term(logps, mask, coef=-1.0)


def test_sft_coef_schedule():
    assert sft_coef_at(7, coef=0.2) == 0.2
    assert sft_coef_at(0, coef=0.2, schedule="linear_decay", max_steps=10) == pytest.approx(0.2)
    assert sft_coef_at(5, coef=0.2, schedule="linear_decay", max_steps=10) == pytest.approx(0.1)
    assert sft_coef_at(12, coef=0.2, schedule="linear_decay", max_steps=10) == 0.0
    with pytest.raises(ValueError, match="needs max_steps >= 1"):
        sft_coef_at(0, coef=0.2, schedule="linear_decay")
    with pytest.raises(ValueError, match="schedule must be one of"):
        sft_coef_at(0, coef=0.2, schedule="cosine")


# ---- the rows -------------------------------------------------------------------------------------------------------
def _group(item, rewards):
    return Group(item, [Rollout(item, [1, 2], [0, 1], r) for r in rewards])


def test_zero_variance_failed_groups_and_correct_context_rows_are_picked():
    rows = {"a": {"condition": "correct"}, "b": {"condition": "misleading"}, "c": {"condition": "correct"},
            "d": {"condition": "irrelevant"}}
    groups = [_group("a", [0, 0, 0]), _group("b", [1, 0, 0]), _group("c", [1, 1, 1]), _group("d", [0, 0, 0]),
              _group("a", [0, 0, 0])]
    assert picked_items(groups, rows, rule="zero_variance_failed") == ["a", "d"]  # all 0, each once
    assert picked_items(groups, rows, rule="correct_context") == ["a", "c"]


def test_bad_rows_fail_in_one_line_naming_the_field():
    rows = [{"item_id": "x", "prompt": "p", "gold": "G", "_path": "rows.jsonl", "_line": 3}]
    assert target_text(rows[0], "The answer is {gold}.") == "The answer is G."
    with pytest.raises(DataError, match=r"rows\.jsonl.*line 3.*sft_target") as e:
        check_sft_rows(rows, rule="zero_variance_failed", template="{subject} is {gold}")
    assert "\n" not in str(e.value)
    with pytest.raises(DataError, match="condition"):
        check_sft_rows(rows, rule="correct_context", template="{gold}")
    check_sft_rows(rows, rule="zero_variance_failed", template="{gold}")


def test_the_default_target_is_scored_right_by_the_demos_reward():
    from trainer.rl.rewards import answer_match

    row = {"item_id": "capital-BF", "prompt": "Question: What is the capital of Burkina Faso?", "gold": "Ouagadougou",
           "answer_type": "short_text", "wrong_value": "Bobo-Dioulasso"}
    assert answer_match(target_text(row, GRPOAlgoConfig().sft_target), row) == 1.0


ROWS = [{"item_id": f"i{k}", "prompt": f"key k{k}?", "gold": k, "answer_type": "numeric",
         "condition": "correct" if k % 2 else "misleading"} for k in range(8)]


def _script(request, j, seed):
    """gold 0: all right; gold 1 and 2: all wrong (zero-variance failed groups); the rest: sample 0 right."""
    gold = int(request.messages[-1]["content"][5])
    return str(gold) if gold == 0 or (gold > 2 and j == 0) else "x"


def _source(tokenizer, *, rank=0, world=1, gather=None, grad_accum=2, num_groups=2, **algo):
    s = RolloutSettings.from_config(GRPOAlgoConfig(group_size=4, max_new_tokens=4, max_refill_rounds=3, **algo),
                                    num_groups=num_groups, grad_accum=grad_accum, prompt_settings=PromptSettings(), seed=0)
    mode = SingleTurnMode(s, tokenizer, GuardedReward(resolve_reward("numeric_match")))
    backend = ScriptedBackend(tokenizer, _script)
    return RolloutSource(ROWS, ShuffleSampler(len(ROWS), seed=0), mode, settings=s, backend_factory=lambda: backend,
                         ranks=Ranks(rank, world, gather)), backend


def _drawn(backend) -> list[str]:
    return [r.messages[-1]["content"] for r in backend.requests]


def test_zero_variance_failed_groups_produce_sft_rows(tiny_tokenizer):
    src, backend = _source(tiny_tokenizer, sft_coef=0.1)
    mbs = [src.next_microbatch() for _ in range(2)]
    m = src.pop_metrics()
    failed = [f"i{k}" for k in (1, 2) if f"key k{k}?" in _drawn(backend)]
    assert failed, "the seed draws a failed group"  # the drop/refill rule dropped them ...
    assert not {x for mb in mbs for x in mb["item_ids"]} & set(failed)
    sft = [x for mb in mbs if mb["sft"] for x in mb["sft"]["item_ids"]]  # ... and the SFT term keeps them
    assert sorted(sft) == sorted(failed) and m["sft/rows"] == len(failed) and m["zero_variance_groups"] >= len(failed)
    mb = next(mb for mb in mbs if mb["sft"])
    row = mb["sft"]
    n = int(row["attention_mask"][0].sum())
    target = row["input_ids"][0, :n][row["completion_mask"][0, :n].bool()].tolist()
    gold = int(row["item_ids"][0][1:])
    assert target == tiny_tokenizer(f"The answer is {gold}.", add_special_tokens=False)["input_ids"] + [
        tiny_tokenizer.eos_token_id]
    assert row["num_tokens"] * 2 == m["sft/tokens"]  # the step's SFT tokens over grad_accum x world slots
    assert mbs[0]["step"] == 0

    off, _ = _source(tiny_tokenizer)  # coef 0: no SFT rows, no metrics, the batch as before
    assert off.next_microbatch()["sft"] is None and "sft/rows" not in off.pop_metrics()


def test_correct_context_rows_are_every_correct_row_drawn(tiny_tokenizer):
    src, backend = _source(tiny_tokenizer, sft_coef=0.1, sft_rows="correct_context")
    mbs = [src.next_microbatch() for _ in range(2)]
    want = {f"i{k}" for k in range(8) if k % 2 and f"key k{k}?" in _drawn(backend)}
    assert {x for mb in mbs if mb["sft"] for x in mb["sft"]["item_ids"]} == want and want


def test_two_ranks_split_the_sft_rows_without_a_collective(tiny_tokenizer):
    """Two simulated ranks (threads exchanging their groups as the real ranks do) hold every SFT row of the global
    batch exactly once between them, and their normaliser is the global SFT token count / (grad_accum * world)."""
    import threading

    barrier, slots = threading.Barrier(2, timeout=30), [None, None]

    def gather(rank):
        def g(obj):
            slots[rank] = obj
            barrier.wait()
            out = list(slots)
            barrier.wait()
            return out
        return g

    def run(rank):
        src, _ = _source(tiny_tokenizer, rank=rank, world=2, gather=gather(rank), grad_accum=1, num_groups=6,
                         sft_coef=0.1, sft_rows="correct_context")  # 6 of the 8 rows: >= 2 correct ones
        mb = src.next_microbatch()
        return mb["sft"], src._batch["sft"]

    with ThreadPoolExecutor(2) as pool:
        (a, full), (b, full_b) = pool.map(run, (0, 1))
    assert full == full_b and len(full["item_ids"]) >= 2
    got = [x for part in (a, b) if part for x in part["item_ids"]]
    assert sorted(got) == sorted(full["item_ids"])
    assert all(part["num_tokens"] * 2 == full["tokens"] for part in (a, b) if part)
    assert sft_microbatch(full, 0, rank=0, world=1, grad_accum=1, tokenizer=tiny_tokenizer)["item_ids"] == \
        full["item_ids"]


# ---- the step's loss on the tiny model ---------------------------------------------------------------------------
def _step_inputs(tiny_model, tiny_tokenizer):
    import test_grpo_shared_prompt as sp

    model = sp._lora(tiny_model)
    mb = sp._microbatch(4, seed=1)
    rows = [{"item_id": "u1", "prompt": "What is the capital of Kenya?", "gold": "Nairobi"},
            {"item_id": "u2", "prompt": "In which country is Matola?", "gold": "Mozambique"}]
    groups = [_group("u1", [0, 0, 0, 0]), _group("u2", [0, 0, 0, 0])]
    sft = sft_batch(groups, rows, rule="zero_variance_failed", template="The answer is {gold}.",
                    tokenizer=tiny_tokenizer, prompt_settings=PromptSettings())
    with_sft = {**mb, "step": 0, "sft": sft_microbatch(sft, 0, rank=0, world=1, grad_accum=1, tokenizer=tiny_tokenizer)}
    return model, mb, with_sft


def _loss(model, mb, **algo):
    from selectrust.model.policy import Reference
    from trainer.rl.step import grpo_step
    from trainer.logprobs.logprobs import sequence_logprobs

    model.zero_grad(set_to_none=True)
    loss, metrics = grpo_step(model, mb, algo=GRPOAlgoConfig(kl_beta=0.05, **algo), reference=Reference(model, lora=True),
                              policy=model, device="cpu", logprobs=sequence_logprobs, max_steps=10)
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return loss.detach(), metrics, grads


def test_the_term_changes_the_loss_only_when_coef_is_positive(tiny_model, tiny_tokenizer):
    from trainer.logprobs.logprobs import sequence_logprobs

    model, mb, with_sft = _step_inputs(tiny_model, tiny_tokenizer)
    today, m_today, g_today = _loss(model, mb)  # the micro-batch as the rollouts built it before the SFT term
    zero, m_zero, g_zero = _loss(model, with_sft, sft_coef=0.0)
    assert torch.equal(zero, today) and torch.equal(g_zero, g_today)  # coef 0: bit-identical, SFT rows ignored
    assert not any(k.startswith("sft/") for k in m_zero) and m_zero.keys() == m_today.keys()

    sft = with_sft["sft"]
    with torch.no_grad():
        lp = sequence_logprobs(model, sft["input_ids"], sft["attention_mask"], sft["completion_mask"])[1]
    nll = -(lp * sft["completion_mask"]).sum() / sft["num_tokens"]
    on, m_on, g_on = _loss(model, with_sft, sft_coef=0.5)
    torch.testing.assert_close(on, today + 0.5 * nll, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(m_on["sft/loss"], nll, rtol=1e-5, atol=1e-6)
    assert m_on["sft/coef"] == 0.5 and not torch.allclose(g_on, g_today)
    decayed = _loss(model, {**with_sft, "step": 5}, sft_coef=0.5, sft_schedule="linear_decay")
    assert decayed[1]["sft/coef"] == pytest.approx(0.25)
    torch.testing.assert_close(decayed[0], today + 0.25 * nll, rtol=1e-5, atol=1e-6)
    empty = _loss(model, {**mb, "step": 0, "sft": None}, sft_coef=0.5)  # a micro-batch with no SFT row
    assert torch.equal(empty[0], today) and float(empty[1]["sft/loss"]) == 0.0


# ---- config and recipe -------------------------------------------------------------------------------------------
def test_config_checks_fail_in_one_line():
    from selectrust.core.errors import ConfigError
    from trainer.config.validation import _validate_sft_term

    def cfg(max_steps=10, **algo):
        return SimpleNamespace(algo=GRPOAlgoConfig(**algo), trainer=SimpleNamespace(max_steps=max_steps))

    _validate_sft_term(cfg(sft_coef=0.1, sft_schedule="linear_decay"))
    for c, words in ((cfg(sft_coef=-0.1), "must be >= 0"), (cfg(sft_coef=0.1, env="toy_lookup"), "single-turn"),
                     (cfg(0, sft_coef=0.1, sft_schedule="linear_decay"), "trainer.max_steps")):
        with pytest.raises(ConfigError, match=words) as e:
            _validate_sft_term(c)
        assert "\n" not in str(e.value)


def test_recipe_logs_the_sft_term_end_to_end(tmp_path):
    from tests.recipes.test_grpo_recipe import SMALL, _metrics, _run

    run = tmp_path / "grpo"
    p = _run(run, *SMALL, "trainer.max_steps=2", "algo.sft_coef=0.5", "algo.sft_schedule=linear_decay")
    assert p.returncode == 0, p.stderr[-3000:]
    lines = _metrics(run)
    assert [l["sft/coef"] for l in lines] == [0.5, 0.25]
    assert all(l["sft/rows"] >= 1 and l["sft/loss"] > 0 for l in lines)
    assert all(k in lines[0] for k in ("zero_variance_groups", "groups_dropped", "zero_variance_frac"))
