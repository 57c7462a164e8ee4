"""The stage runner (recipes/chain.py, trainer/core/stages.py): stages hand their final/ adapter on, finished
stages are skipped on re-run (and a changed stage config is refused), bad chains fail before training.
The SIGKILL-during-GRPO resume test of the Box2 chain is slow (tests/test_chain.py::test_box2_chain_...)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from recipe_utils import CONF, ROOT, load_recipe, read_metrics, reset_accelerate
from trainer.config import ChainRunConfig, ConfigError

# short stages; the SFT stage on a 200-example file (the toy chat mix has 48k rows to tokenize)
FAST = ["stages.sft.extra=['trainer.max_steps=3','eval=none','data.train_path=toy:0/box2_sft.jsonl']",
        "stages.dpo.extra=['trainer.max_steps=2','eval=none']", "common=['trainer.progress=false']"]


def _chain(run_dir, *overrides):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from trainer.config import register_schemas

    register_schemas()
    reset_accelerate()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="chain", overrides=[f"trainer.run_dir={run_dir}", *overrides])
        return load_recipe("chain").run(cfg)


def _stages(spec: dict):
    return OmegaConf.merge(OmegaConf.structured(ChainRunConfig), {"stages": spec}).stages


def _start_logps(cfg, pairs_path, adapter=None) -> tuple[float, float]:
    """Mean summed log-prob of the chosen and of the rejected completions of every pair in ``pairs_path``,
    under ``cfg.model.path`` with ``adapter`` merged by peft (not the trainer's code), rendered as ``cfg``
    (a stage's saved config) renders them."""
    import torch
    from peft import PeftModel

    from eval_hooks.models import load_model, load_tokenizer
    from eval_hooks.prompts import PromptSettings
    from trainer.model.logprobs import build_preference_batch, sequence_logprobs

    model, tok = load_model(cfg.model.path), load_tokenizer(cfg.model.path)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    rows = [json.loads(line) for line in pairs_path.read_text().splitlines()]
    batch = build_preference_batch(tok, [r["prompt"] for r in rows], [r["chosen"] for r in rows],
                                   [r["rejected"] for r in rows], max_prompt_len=cfg.data.max_prompt_len,
                                   max_completion_len=cfg.data.max_completion_len,
                                   truncation="keep_start" if cfg.data.truncation == "keep_start" else "keep_end",
                                   prompt_settings=PromptSettings.from_config(cfg.prompt))
    with torch.no_grad():
        logps, _, _ = sequence_logprobs(model.eval(), batch.input_ids, batch.attention_mask, batch.completion_mask)
    chosen, rejected = logps.float().chunk(2)
    return chosen.mean().item(), rejected.mean().item()


def test_sft_then_dpo_chain_hands_on_the_adapter_and_skips_finished_stages(tmp_path):
    import dist_helpers as dh

    # the DPO stage's first batch is every pair once (loss weighting, batch = the 8 rows of 2 quartets), so
    # its step-1 log-probs are the mean over the file under the weights the stage started from
    pairs = dh.write_pairs(tmp_path / "pairs.jsonl", 2)
    run_dir = tmp_path / "run"
    fast = [*FAST[:1], f"stages.dpo.extra=['trainer.max_steps=2','eval=none','data.train_path={pairs}',"
            "'algo.weighting=loss','optim.batch_size=8','optim.grad_accum=1']", *FAST[2:]]
    records = _chain(run_dir, "recipe=scope_sft_then_dpo_tiny", *fast)
    assert [r["status"] for r in records.values()] == ["trained", "trained"]
    assert json.loads((run_dir / "chain.json").read_text())["stages"]["dpo"]["step"] == 2
    dpo_cfg = OmegaConf.load(run_dir / "stages" / "dpo" / "config.yaml")
    assert dpo_cfg.model.init_adapter == str(run_dir / "stages" / "sft" / "final")
    assert dpo_cfg.model.init_adapter_mode == "merge" and dpo_cfg.model.path == "tiny"
    first = read_metrics(run_dir / "stages" / "dpo")[0]
    assert first["step"] == 1
    sft = _start_logps(dpo_cfg, pairs, adapter=run_dir / "stages" / "sft" / "final")
    base = _start_logps(dpo_cfg, pairs)
    assert (first["logps/chosen"], first["logps/rejected"]) == (pytest.approx(sft[0], abs=1e-4),
                                                                pytest.approx(sft[1], abs=1e-4))
    assert abs(sft[0] - base[0]) > 0.1 and abs(sft[1] - base[1]) > 0.1    # the SFT stage moved them (~0.8, ~1.0)
    before = {s: (run_dir / "stages" / s / "metrics.jsonl").read_text() for s in ("sft", "dpo")}

    records = _chain(run_dir, "recipe=scope_sft_then_dpo_tiny", *fast)
    assert [r["status"] for r in records.values()] == ["skipped", "skipped"]
    assert {s: (run_dir / "stages" / s / "metrics.jsonl").read_text() for s in ("sft", "dpo")} == before

    changed = [o.replace("trainer.max_steps=3", "trainer.max_steps=4") for o in fast]
    with pytest.raises(ConfigError, match=r"(?s)stage 'sft' finished .* trainer.max_steps: saved 3 != now 4"):
        _chain(run_dir, "recipe=scope_sft_then_dpo_tiny", *changed)


def test_bad_chains_fail_before_training():
    from trainer.core.stages import stage_sources

    assert stage_sources(_stages({"a": {"script": "sft", "init_from": None}, "b": {"script": "dpo"},
                                  "c": {"script": "grpo", "init_from": "a"}})) == {"a": None, "b": "a", "c": "a"}
    with pytest.raises(ConfigError, match="stages.b.init_from='c': no earlier stage"):
        stage_sources(_stages({"a": {"script": "sft"}, "b": {"script": "dpo", "init_from": "c"},
                               "c": {"script": "sft"}}))
    with pytest.raises(ConfigError, match="stages.a.script='ppo'"):
        stage_sources(_stages({"a": {"script": "ppo"}}))
    with pytest.raises(ValidationError, match="init_mode"):  # a typed choice: refused when the config is built
        stage_sources(_stages({"a": {"script": "sft", "init_mode": "stack"}}))
    with pytest.raises(ConfigError, match="names no stage"):
        stage_sources(_stages({}))


def test_a_misspelt_override_in_a_later_stage_fails_before_the_first_trains(tmp_path):
    with pytest.raises(ConfigError, match=r"stages.dpo \(dpo.py"):
        _chain(tmp_path, "recipe=scope_sft_then_dpo_tiny", "stages.dpo.extra=['algo.betta=0.2']")
    assert not (tmp_path / "stages").exists()
    with pytest.raises(ConfigError, match=r"(?s)stages.sft \(sft.py.*data.train_path"):  # the paper chain needs data
        _chain(tmp_path, "recipe=box2_qwen3_4b")


def test_start_weights_of_a_stage(tmp_path):
    from trainer.core.stages import StageRunner

    runner = StageRunner(tmp_path, seed=0, compose=None, runners={})
    (tmp_path / "stages" / "full" / "final").mkdir(parents=True)
    (tmp_path / "stages" / "full" / "final" / "config.json").write_text("{}")
    assert runner.start_overrides("full", "merge") == [f"model.path='{tmp_path}/stages/full/final'"]
    lora = tmp_path / "stages" / "lora"
    (lora / "final").mkdir(parents=True)
    (lora / "final" / "adapter_config.json").write_text("{}")
    (lora / "config.yaml").write_text("model: {path: /base, init_adapter: null, init_adapter_mode: merge}\n")
    assert runner.start_overrides("lora", "continue") == [
        "model.path='/base'", f"model.init_adapter='{lora}/final'", "model.init_adapter_mode=continue"]
    # a fresh adapter trained on a merged model cannot be handed on alone
    (lora / "config.yaml").write_text("model: {path: /base, init_adapter: /sft/final, init_adapter_mode: merge}\n")
    with pytest.raises(ConfigError, match="recipes/merge.py"):
        runner.start_overrides("lora", "merge")
    with pytest.raises(FileNotFoundError, match="did not complete"):
        runner.start_overrides("missing", "merge")


def _box2_chain(run_dir, env=None, **popen):
    cmd = [sys.executable, str(ROOT / "recipes" / "chain.py"), "recipe=box2_tiny", f"trainer.run_dir={run_dir}",
           "common=['trainer.progress=false']"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            **popen)


@pytest.mark.slow
def test_box2_chain_killed_during_grpo_resumes_and_matches_an_uninterrupted_chain(tmp_path):
    """SIGKILL the Box2 tiny chain once its GRPO stage has a complete checkpoint (mid-run); the same command
    again skips SFT, resumes GRPO from that checkpoint, and ends with the uninterrupted chain's metrics."""
    ref_dir, run_dir = tmp_path / "uninterrupted", tmp_path / "killed"
    ref = _box2_chain(ref_dir)
    out, _ = ref.communicate(timeout=900)
    assert ref.returncode == 0, out[-3000:]

    proc = _box2_chain(run_dir)
    grpo = run_dir / "stages" / "grpo"
    deadline = time.time() + 900
    while not (grpo / "checkpoints" / "step_4" / "COMPLETE").exists():
        assert proc.poll() is None and time.time() < deadline, "the chain ended before GRPO checkpointed step 4"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (grpo / "run_complete.json").exists()
    sft_record = (run_dir / "stages" / "sft" / "run_complete.json").read_text()
    sft_metrics = (run_dir / "stages" / "sft" / "metrics.jsonl").read_text()

    again = _box2_chain(run_dir)
    out, _ = again.communicate(timeout=900)
    assert again.returncode == 0, out[-3000:]
    assert "sft: already complete" in out and "grpo: resuming" in out, out[-3000:]
    assert "[selectrust] resumed from" in out and "checkpoints/step_" in out
    assert (run_dir / "stages" / "sft" / "run_complete.json").read_text() == sft_record  # SFT not repeated
    assert (run_dir / "stages" / "sft" / "metrics.jsonl").read_text() == sft_metrics
    final = json.loads((grpo / "run_complete.json").read_text())["final_metrics"]
    expected = json.loads((ref_dir / "stages" / "grpo" / "run_complete.json").read_text())["final_metrics"]
    drop = ("step_seconds", "time_generation_s", "time_reward_s", "generation_fraction", "eval/seconds")  # timings
    assert {k: v for k, v in final.items() if k not in drop} == {k: v for k, v in expected.items() if k not in drop}
    lines = [{k: v for k, v in m.items() if k not in ("time", *drop)} for m in read_metrics(grpo)]
    ref_lines = [{k: v for k, v in m.items() if k not in ("time", *drop)} for m in read_metrics(ref_dir / "stages/grpo")]
    assert lines == ref_lines
