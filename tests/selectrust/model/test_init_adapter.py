"""Starting from an adapter (model.init_adapter, merge | continue): the first step's policy is the SFT
model and so is its reference (GRPO KL 0, DPO margins 0); the merge export; bad adapter dirs fail early."""

import json

import pytest
import torch
from omegaconf import OmegaConf

from recipe_utils import compose, read_metrics, run_recipe
from selectrust.core.errors import ConfigError
from trainer.config import ModelConfig

SFT = ["recipe=box2_sft_tiny", "model.lora.enabled=true", "model.lora.r=16", "model.lora.alpha=32",
       "model.lora.target_modules=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,lm_head]",
       "optim.lr=2.0e-2", "optim.batch_size=16", "trainer.max_steps=8", "eval=none", "trainer.progress=false"]


@pytest.fixture(scope="module")
def sft_adapter(tmp_path_factory):
    """A real SFT stage's final/ adapter (LoRA, 8 steps on the toy Box2 data)."""
    run_dir = tmp_path_factory.mktemp("sft")
    run_recipe("sft", "sft", [*SFT, f"trainer.run_dir={run_dir}"])
    return run_dir / "final"


def _model_cfg(**kw):
    cfg = OmegaConf.structured(ModelConfig)
    for k, v in kw.items():
        OmegaConf.update(cfg, k, v)
    return cfg


def _batch():
    from selectrust.model import load_tokenizer

    tok = load_tokenizer("tiny")
    texts = ["Task: 3 + 4. Workflow: add them. Answer: 7", "Key q17? Hint: 5. Answer: 2"]
    enc = tok(texts, return_tensors="pt", padding=True)
    cm = enc.attention_mask.clone()
    cm[:, :10] = 0
    return enc.input_ids, enc.attention_mask, cm


def _logps(model, batch):
    from trainer.logprobs.logprobs import sequence_logprobs

    with torch.no_grad():
        return sequence_logprobs(model, *batch)[1]


def _sft_model(adapter):
    from peft import PeftModel

    from selectrust.model import load_model

    return PeftModel.from_pretrained(load_model("tiny"), str(adapter)).eval()


@pytest.mark.parametrize("mode, lora", [("merge", True), ("continue", True), ("merge", False)])
def test_policy_and_reference_start_as_the_sft_model(sft_adapter, mode, lora):
    from selectrust.model import Reference, load_model, load_policy

    batch = _batch()
    sft = _logps(_sft_model(sft_adapter), batch)
    base = _logps(load_model("tiny"), batch)
    assert (sft - base).abs().max() > 1e-2  # the SFT adapter moved the model: the checks below can fail

    cfg = _model_cfg(init_adapter=str(sft_adapter), init_adapter_mode=mode, **{"lora.enabled": lora})
    policy, _ = load_policy(cfg, seed=0)
    policy.eval()
    ref = Reference(policy, lora=lora)
    got = _logps(policy, batch)
    with ref.context(policy) as ref_model:
        ref_logps = _logps(ref_model, batch)
    torch.testing.assert_close(got, sft, atol=1e-5, rtol=0)
    assert (got - ref_logps).abs().max() <= 1e-6  # KL(policy || reference) = 0 at the first step


def test_continue_trains_the_loaded_adapter_and_keeps_a_frozen_reference_copy(sft_adapter, tmp_path):
    from selectrust.model import REFERENCE_ADAPTER, Reference, load_policy, save_policy
    from trainer.runtime.optim import build_optimizer

    batch = _batch()
    sft = _logps(_sft_model(sft_adapter), batch)
    policy, _ = load_policy(_model_cfg(init_adapter=str(sft_adapter), init_adapter_mode="continue"), seed=0)
    ref = Reference(policy, lora=True)
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n and f".{REFERENCE_ADAPTER}." not in n for n in trainable)
    opt = build_optimizer(policy, OmegaConf.create({"lr": 0.05, "betas": [0.9, 0.999], "eps": 1e-8,
                                                    "weight_decay": 0.0}))
    from trainer.logprobs.logprobs import sequence_logprobs

    with ref.context(policy) as m:  # the context must leave the trained adapter trainable
        _logps(m, batch)
    assert {n for n, p in policy.named_parameters() if p.requires_grad} == trainable
    loss = -sequence_logprobs(policy, *batch)[0].mean()
    loss.backward()
    opt.step()
    moved = _logps(policy, batch)
    with ref.context(policy) as m:
        ref_after = _logps(m, batch)
    assert (moved - sft).abs().max() > 1e-3          # the loaded adapter itself trained
    torch.testing.assert_close(ref_after, sft, atol=1e-5, rtol=0)  # the reference copy did not
    save_policy(policy, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "README.md", "adapter_config.json", "adapter_model.safetensors"]  # no reference/ sub-adapter


def _spy_first_policy_forward(monkeypatch):
    """Records the inputs and token log-probs of the first gradient-enabled forward (step 1's policy), through
    the unshared path or GRPO's shared-prompt one (``algo.shared_prompt``, trainer/logprobs/group_packing.py)."""
    import trainer.logprobs.group_packing as gp
    import trainer.logprobs.logprobs as lp

    seen = {}

    def spying(real):
        def spy(model, ids, att, cm, **kw):
            out = real(model, ids, att, cm, **kw)
            if torch.is_grad_enabled() and "logps" not in seen:
                seen.update(inputs=(ids.cpu(), att.cpu(), cm.cpu()), logps=out[1].detach().cpu())
            return out
        return spy

    monkeypatch.setattr(lp, "sequence_logprobs", spying(lp.sequence_logprobs))
    monkeypatch.setattr(gp, "group_sequence_logprobs", spying(gp.group_sequence_logprobs))
    return seen


COMMON = ["trainer.max_steps=1", "eval=none", "trainer.progress=false"]


@pytest.mark.parametrize("mode", ["merge", "continue"])
def test_grpo_from_sft_adapter_first_step_kl_is_zero(sft_adapter, tmp_path, monkeypatch, mode):
    seen = _spy_first_policy_forward(monkeypatch)
    run_recipe("grpo", "grpo", [*COMMON, "algo.kl_beta=0.1", f"model.init_adapter={sft_adapter}",
                                f"model.init_adapter_mode={mode}", f"trainer.run_dir={tmp_path}"])
    first = read_metrics(tmp_path)[0]
    assert first["step"] == 1 and abs(first["kl"]) <= 1e-6, first
    torch.testing.assert_close(seen["logps"], _logps(_sft_model(sft_adapter), seen["inputs"]), atol=1e-5, rtol=0)


@pytest.mark.parametrize("mode", ["merge", "continue"])
def test_dpo_from_sft_adapter_first_step_margins_are_zero(sft_adapter, tmp_path, monkeypatch, mode):
    seen = _spy_first_policy_forward(monkeypatch)
    # the spy reads the two-sequence path (data.shared_prompt=false); the packed path equals it
    # (tests/trainer/logprobs/test_shared_prompt.py)
    run_recipe("dpo", "dpo", [*COMMON, "optim.batch_size=8", f"model.init_adapter={sft_adapter}",
                              f"model.init_adapter_mode={mode}", f"trainer.run_dir={tmp_path}",
                              "data.shared_prompt=false"])
    first = read_metrics(tmp_path)[0]
    assert first["step"] == 1 and abs(first["rewards/margins"]) <= 1e-6, first
    torch.testing.assert_close(seen["logps"], _logps(_sft_model(sft_adapter), seen["inputs"]), atol=1e-5, rtol=0)


def test_merge_export_writes_the_merged_model(sft_adapter, tmp_path):
    from selectrust.model import load_model
    from recipe_utils import load_recipe

    out = tmp_path / "merged"
    cfg = compose("merge", [f"adapters=[{sft_adapter}]", f"out_dir={out}"])
    load_recipe("merge").run(cfg)
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    assert json.loads((out / "merge_info.json").read_text())["adapters"] == [str(sft_adapter.resolve())]
    batch = _batch()
    torch.testing.assert_close(_logps(load_model(str(out)), batch), _logps(_sft_model(sft_adapter), batch),
                               atol=1e-5, rtol=0)
    with pytest.raises(ConfigError, match="exists"):
        load_recipe("merge").run(cfg)


def test_standalone_evaluation_merges_the_init_adapter(sft_adapter):
    from trainer.eval_bridge import build_inference_backend

    cfg = compose("evaluate", [f"model.init_adapter={sft_adapter}"])
    backend = build_inference_backend(cfg.model, cfg.generation)
    batch = _batch()
    torch.testing.assert_close(_logps(backend.model.cpu(), batch), _logps(_sft_model(sft_adapter), batch),
                               atol=1e-5, rtol=0)


@pytest.mark.parametrize("precision,merged", [("no", True), ("bf16", False)])
def test_standalone_evaluation_of_an_adapter_merges_it_only_in_fp32(sft_adapter, precision, merged):
    """``adapter_path`` in a stand-alone evaluation: merged into the fp32 weights when generation runs in fp32 (the
    merge rounds at 1e-7 and saves peft's LoRA layers); under bf16 autocast kept apart as a peft adapter (bf16
    rounding of W + BA would lose part of a small delta; its frozen base weights are then cast once per batch,
    ``test_hf_generation``). Either way the log-probs equal the peft model's."""
    from peft import PeftModel

    from trainer.eval_bridge import build_inference_backend

    cfg = compose("evaluate", [f"generation.mixed_precision={precision}"])
    model = build_inference_backend(cfg.model, cfg.generation, adapter_path=str(sft_adapter)).model.cpu()
    assert isinstance(model, PeftModel) is not merged
    batch = _batch()
    torch.testing.assert_close(_logps(model, batch), _logps(_sft_model(sft_adapter), batch), atol=1e-5, rtol=0)


def test_bad_init_adapter_fails_before_loading(tmp_path):
    from trainer.config import validate_sft

    def check(path, *extra):
        validate_sft(compose("sft", [f"model.init_adapter={path}", *extra]))

    with pytest.raises(ConfigError, match="no such directory"):
        check(tmp_path / "missing")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "adapter_config.json").write_text("{}")
    (tmp_path / "bin" / "adapter_model.bin").write_bytes(b"pickle")
    with pytest.raises(ConfigError, match="only safetensors"):
        check(tmp_path / "bin")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="use it as model.path"):
        check(tmp_path / "full")
    (tmp_path / "bin" / "adapter_model.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError, match="needs model.lora.enabled"):
        check(tmp_path / "bin", "model.init_adapter_mode=continue", "model.lora.enabled=false")
    with pytest.raises(Exception, match="init_adapter_mode"):  # refused at composition (a typed choice)
        check(tmp_path / "bin", "model.init_adapter_mode=stack")


# -- issue 25: adapters are checked for finite values and for shapes that fit the base ------------------
def _nan_adapter(sft_adapter, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    bad = tmp_path / "nan_adapter"
    shutil.copytree(sft_adapter, bad)
    tensors = load_file(str(bad / "adapter_model.safetensors"))
    name = sorted(k for k in tensors if "lora_A" in k)[0]
    tensors[name][0, 0] = float("nan")
    save_file(tensors, str(bad / "adapter_model.safetensors"))
    return bad, name


@pytest.fixture()
def no_model_load(monkeypatch):
    import selectrust.model
    import selectrust.model.load

    def refuse(*a, **k):
        raise AssertionError("a model was loaded before the adapter check")

    for module in (selectrust.model, selectrust.model.load):  # the entry, and where the policy loader looks it up
        monkeypatch.setattr(module, "load_model", refuse)


def _refused_everywhere(adapter, tmp_path, pattern, *model):
    """merge, model.init_adapter (an SFT run) and evaluate's adapter_path all refuse ``adapter`` before any model
    loads, leaving no output and no run records."""
    from recipe_utils import load_recipe

    out = tmp_path / "merged"
    with pytest.raises(ConfigError, match=pattern):
        load_recipe("merge").run(compose("merge", [f"adapters=[{adapter}]", f"out_dir={out}", *model]))
    assert not out.exists() and not list(tmp_path.glob(".merged-*"))
    run = tmp_path / "run"
    with pytest.raises(ConfigError, match=pattern):
        run_recipe("sft", "sft", [*SFT, f"trainer.run_dir={run}", f"model.init_adapter={adapter}", *model])
    assert not (run / "meta.json").exists() and not (run / "data_hashes.json").exists()
    items = tmp_path / "items.jsonl"
    items.write_text("")
    with pytest.raises(ConfigError, match=pattern):
        load_recipe("evaluate").run(compose("evaluate", [f"adapter_path={adapter}", f"eval.path={items}",
                                                          f"out_dir={tmp_path / 'eval'}", *model]))


def test_a_nan_adapter_is_refused_everywhere_naming_file_and_tensor(sft_adapter, tmp_path, no_model_load):
    bad, name = _nan_adapter(sft_adapter, tmp_path)
    pattern = rf"{bad / 'adapter_model.safetensors'}: tensor '{name}' holds 1 non-finite value"
    _refused_everywhere(bad, tmp_path, pattern)


def test_a_nan_adapter_is_refused_where_it_loads(sft_adapter, tmp_path):
    """Code that loads an adapter without the config checks (a pipeline's own evaluation) refuses it too."""
    from selectrust.model import AdapterError, load_base_with_adapters, load_policy
    from trainer.eval_bridge import build_inference_backend

    bad, name = _nan_adapter(sft_adapter, tmp_path)
    with pytest.raises(AdapterError, match=f"tensor '{name}'"):
        load_base_with_adapters(_model_cfg(), [str(bad)])
    with pytest.raises(AdapterError, match=f"tensor '{name}'"):
        load_policy(_model_cfg(**{"init_adapter": str(bad), "init_adapter_mode": "continue",
                                   "lora.enabled": True}), seed=0)
    cfg = compose("evaluate", [])
    with pytest.raises(AdapterError, match=f"tensor '{name}'"):
        build_inference_backend(cfg.model, cfg.generation, adapter_path=str(bad))


def test_an_adapter_of_another_base_is_refused_in_one_line_naming_both_shapes(sft_adapter, tmp_path,
                                                                                no_model_load):
    # trained on tiny (hidden 64); tiny-demo has hidden 128
    pattern = (r"^[^\n]*tensor 'base_model.model.[a-z0-9_.]+' has shape \[\d+, 64\] but "
               r"model.path='tiny-demo' needs \[\d+, 128\] there: the adapter was trained on another base[^\n]*$")
    _refused_everywhere(sft_adapter, tmp_path, pattern, "model.path=tiny-demo")
