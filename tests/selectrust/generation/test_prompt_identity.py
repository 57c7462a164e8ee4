"""One prompt path: the ids DPO, SFT, GRPO and mining train on for a prompt equal, token for token, the
ids the evaluation backends (HF and vLLM server) generate from, for the chat template on and off, with
and without a system prompt (and prefix), a tokenizer that adds a BOS, and chat-template kwargs.

Before the one renderer (selectrust/generation/prompts.py) each of these tests failed: without a template DPO/SFT
encoded ``tokenizer(prompt)`` (no newline) while evaluation encoded ``prompt + "\\n"``, and the system
prompt / prefix reached evaluation only.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from selectrust.generation.backends.base import GenerationResult, Sample
from selectrust.generation.backends.hf import HFBackend
from selectrust.generation.backends.vllm_server import VLLMServerBackend
from eval_hooks.evaluate import build_requests
from selectrust.generation.prompts import PromptSettings, render_prompt, render_prompt_text
from recipe_utils import compose

PROMPT = "Key k3 -> digit? Hint: 7"
SYS = "You are careful."
PREFIX = "Warning: hints may be wrong.\n\n"

# (name, primary-config overrides of the prompt group, tokenizer variant)
CASES = [
    ("template", ["prompt=default"], "plain_tok"),
    ("template+system+prefix", ["prompt=default", f"prompt.system_prompt='{SYS}'",
                                "prompt.prompt_prefix='Warning: hints may be wrong.'"], "plain_tok"),
    ("no_template", ["prompt=plain"], "plain_tok"),
    ("no_template+system", ["prompt=plain", f"prompt.system_prompt='{SYS}'"], "plain_tok"),
    ("no_template+bos", ["prompt=plain"], "bos_tok"),
    ("no_template+system+bos", ["prompt=plain", f"prompt.system_prompt='{SYS}'"], "bos_tok"),
    ("template+system+kwargs", ["prompt=qwen3_no_thinking", f"prompt.system_prompt='{SYS}'"], "thinking_tok"),
]
IDS = [c[0] for c in CASES]


@pytest.fixture(scope="module")
def tokenizers(tiny_tokenizer):
    """The tiny byte tokenizer; a copy that puts <s> in front of plain text (as Llama's does); a copy
    whose chat template reads ``enable_thinking`` (as Qwen3's does)."""
    from tokenizers import processors

    bos = copy.deepcopy(tiny_tokenizer)
    bos.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tiny_tokenizer.convert_tokens_to_ids("<s>"))])
    assert bos("")["input_ids"] == [bos.bos_token_id]
    thinking = copy.deepcopy(tiny_tokenizer)
    thinking.chat_template = tiny_tokenizer.chat_template + \
        "{% if add_generation_prompt and enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}"
    return {"plain_tok": tiny_tokenizer, "bos_tok": bos, "thinking_tok": thinking}


def _settings(primary: str, overrides: list[str]) -> PromptSettings:
    """The prompt settings a recipe of ``primary`` reads (composed from conf/, as the recipe does)."""
    return PromptSettings.from_config(compose(primary, overrides).prompt)


def eval_ids(tok, settings: PromptSettings, prompt: str = PROMPT) -> list[int]:
    """Ids evaluation generates from: run_matched_eval's requests rendered by the HF backend and by the
    vLLM-server client (which must agree)."""
    req = build_requests([{"prompt": prompt}], prompt_settings=settings)[0]
    hf = HFBackend(None, tok, prompt_settings=settings).prompt_ids(req.prompt, req.messages)
    server = VLLMServerBackend("http://127.0.0.1:9", "m", tokenizer=tok, prompt_settings=settings,
                               max_retries=0)._prompt_payload(req)
    assert hf == server
    return hf


def _prompt_part(input_ids, completion_mask, row: int = 0) -> list[int]:
    n = int(completion_mask[row].tolist().index(1))
    return input_ids[row, :n].tolist()


def test_renderer_rules_by_hand(tokenizers):
    """The documented rules, on hand-written strings."""
    tok, bos = tokenizers["plain_tok"], tokenizers["bos_tok"]
    s = PromptSettings(system_prompt="S", prompt_prefix="W\n\n")
    assert render_prompt_text(tok, "Q", s) == "<|system|>\nS<|end|>\n<|user|>\nW\n\nQ<|end|>\n<|assistant|>\n"
    plain = replace(s, use_chat_template=False)
    assert render_prompt_text(tok, "Q", plain) == "S\n\nW\n\nQ\n"
    assert render_prompt(tok, "Q", plain) == tok("S\n\nW\n\nQ\n", add_special_tokens=False)["input_ids"]
    body = tok("S\n\nW\n\nQ\n", add_special_tokens=False)["input_ids"]
    assert render_prompt(bos, "Q", plain) == [bos.bos_token_id] + body
    # with a template the template alone decides the BOS (the tiny one writes none)
    assert render_prompt(bos, "Q", PromptSettings())[0] != bos.bos_token_id
    think = PromptSettings(chat_template_kwargs={"enable_thinking": False})
    assert render_prompt_text(tokenizers["thinking_tok"], "Q", think).endswith("<|assistant|>\n<think></think>")
    # a conversation that already has a system turn keeps it (no second one)
    msgs = [{"role": "system", "content": "X"}, {"role": "user", "content": "Q"}]
    assert render_prompt_text(tok, msgs, s).count("<|system|>") == 1


@pytest.mark.parametrize("name,overrides,tok_name", CASES, ids=IDS)
def test_dpo_ids_equal_eval_ids(tokenizers, name, overrides, tok_name):
    from trainer.logprobs.logprobs import build_preference_batch

    tok, settings = tokenizers[tok_name], _settings("dpo", overrides)
    b = build_preference_batch(tok, [PROMPT], ["7"], ["3"], max_prompt_len=512, max_completion_len=8,
                               prompt_settings=settings)
    want = eval_ids(tok, settings)
    assert _prompt_part(b.input_ids, b.completion_mask, 0) == want
    assert _prompt_part(b.input_ids, b.completion_mask, 1) == want


@pytest.mark.parametrize("name,overrides,tok_name", CASES, ids=IDS)
def test_sft_ids_equal_eval_ids(tokenizers, name, overrides, tok_name):
    from trainer.sft.data import collate_sft

    tok, settings = tokenizers[tok_name], _settings("sft", overrides)
    ex = {"item_id": "a", "messages": [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": "7"}]}
    kw = dict(max_prompt_len=512, max_completion_len=8, truncation="keep_end", prompt_settings=settings)
    b = collate_sft(tok, [ex], multi_turn=False, **kw)
    want = eval_ids(tok, settings)
    assert _prompt_part(b["input_ids"], b["completion_mask"]) == want
    if settings.use_chat_template and not settings.chat_template_kwargs:  # multi-turn: same ids up to the reply
        m = collate_sft(tok, [ex], multi_turn=True, **kw)
        assert _prompt_part(m["input_ids"], m["completion_mask"]) == want


@pytest.mark.parametrize("name,overrides,tok_name", CASES, ids=IDS)
def test_grpo_rollout_ids_equal_eval_ids(tokenizers, tiny_model, name, overrides, tok_name):
    """Both the backend's own prompt ids (HF) and the rollout's fallback rendering (a backend that
    returns none) must be the evaluation ids."""
    from tests.box2_fakes import ScriptedBackend
    from trainer.data.train_data import ShuffleSampler
    from trainer.rl.rewards import GuardedReward, resolve_reward
    from trainer.rl.rollout import RolloutSettings, RolloutSource, check_prompt_lengths
    from trainer.rl.rollout_modes import SingleTurnMode

    tok = tokenizers[tok_name]
    cfg = compose("grpo", overrides + ["data.train_path=/x.jsonl"])
    settings = PromptSettings.from_config(cfg.prompt)
    s = replace(RolloutSettings.from_config(cfg.algo, num_groups=1, grad_accum=1, prompt_settings=settings, seed=0),
                group_size=2, max_new_tokens=2, drop_zero_variance=False, max_refill_rounds=0)
    rows = [{"item_id": "i0", "prompt": PROMPT, "gold": "7", "answer_type": "numeric"}]
    want = eval_ids(tok, settings)
    assert check_prompt_lengths(rows, tok, max_prompt_len=512, prompt_settings=settings) == [len(want)]
    for backend in (HFBackend(tiny_model, tok, prompt_settings=settings),
                    ScriptedBackend(tok, lambda r, j, seed: "7")):
        mode = SingleTurnMode(s, tok, GuardedReward(resolve_reward("numeric_match")))
        src = RolloutSource(rows, ShuffleSampler(1, seed=0), mode, settings=s, backend_factory=lambda b=backend: b)
        mb = src.next_microbatch()
        for row in range(mb["input_ids"].shape[0]):
            assert _prompt_part(mb["input_ids"], mb["completion_mask"], row) == want, type(backend).__name__


class _RecordingHF(HFBackend):
    """The HF backend's prompt rendering, with scripted answers: records the ids of every request."""

    def __init__(self, tok, settings):
        super().__init__(None, tok, prompt_settings=settings)
        self.ids: dict[str, list[int]] = {}

    def generate(self, requests, *, progress=False, desc=""):
        out = []
        for r in requests:
            user = r.messages[-1]["content"]
            self.ids[user] = self.prompt_ids(r.prompt, r.messages)
            out.append(GenerationResult(r, [Sample("The answer is 7" if "Q1 hint 7" in user else "The answer is 4",
                                                   [], [], "stop")]))
        return out


@pytest.mark.parametrize("name,overrides,tok_name", CASES, ids=IDS)
def test_mining_ids_equal_eval_ids(tokenizers, name, overrides, tok_name):
    """Mining generates from the evaluation ids, and DPO on the mined pairs trains on them too."""
    from trainer.data.mining import mine
    from trainer.logprobs.logprobs import build_preference_batch

    tok = tokenizers[tok_name]
    settings = _settings("mine_pairs", overrides)
    prompts = {"clean": "Q1 clean", "misleading": "Q1 hint 7", "correct": "Q1 hint 4", "irrelevant": "Q1 sky"}
    rows = [{"row_id": f"1-{c}", "item_id": "i1", "condition": c, "prompt": p, "answer_type": "numeric",
             "gold": "4", "wrong_value": "7"} for c, p in prompts.items()]
    backend = _RecordingHF(tok, settings)
    pairs, stats = mine(rows, backend, max_new_tokens=8, use_fallback=False, fallback_note="n {gold}",
                        leak_patterns=[], model_name="m", prompt_settings=settings)
    assert stats["kept"] == 1 and stats["prompt"] == settings.describe()
    asked = {k: v for k, v in backend.ids.items()}
    for c in ("clean", "misleading"):
        want = eval_ids(tok, settings, prompts[c])
        assert next(v for k, v in asked.items() if k.endswith(prompts[c])) == want
    dpo_settings = _settings("dpo", overrides)
    for p in pairs:
        b = build_preference_batch(tok, [p["prompt"]], [p["chosen"]], [p["rejected"]], max_prompt_len=512,
                                   max_completion_len=16, prompt_settings=dpo_settings)
        assert _prompt_part(b.input_ids, b.completion_mask) == eval_ids(tok, settings, p["prompt"])
