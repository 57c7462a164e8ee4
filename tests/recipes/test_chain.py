"""The stage runner (recipes/chain.py, recipes/stages/): stages hand their final/ adapter on, finished
stages are skipped on re-run (and a changed stage config is refused), bad chains fail before training.
The SIGKILL-during-GRPO resume test of the Box2 chain is slow (tests/recipes/test_chain.py::test_box2_chain_...)."""

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
from selectrust.core.errors import ConfigError
from trainer.config import ChainRunConfig

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

    from selectrust.model import load_model, load_tokenizer
    from selectrust.generation.prompts import PromptSettings
    from trainer.logprobs.logprobs import build_preference_batch, sequence_logprobs

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
    from recipes.stage_recipes import trainers as chain_recipes
    from recipes.stages import stage_sources

    trainers = chain_recipes()
    assert list(trainers) == ["sft", "dpo", "grpo", "distill"]  # the recipes with a config check, in the registry's order
    assert stage_sources(_stages({"a": {"script": "sft", "init_from": None}, "b": {"script": "dpo"},
                                  "c": {"script": "grpo", "init_from": "a"}}), trainers) == {"a": None, "b": "a", "c": "a"}
    with pytest.raises(ConfigError, match="stages.b.init_from='c': no earlier stage"):
        stage_sources(_stages({"a": {"script": "sft"}, "b": {"script": "dpo", "init_from": "c"},
                               "c": {"script": "sft"}}), trainers)
    with pytest.raises(ConfigError, match="stages.a.script='ppo'"):
        stage_sources(_stages({"a": {"script": "ppo"}}), trainers)
    with pytest.raises(ConfigError, match="stages.a.script='evaluate'"):  # a chain's stages train
        stage_sources(_stages({"a": {"script": "evaluate"}}), trainers)
    with pytest.raises(ValidationError, match="init_mode"):  # a typed choice: refused when the config is built
        stage_sources(_stages({"a": {"script": "sft", "init_mode": "stack"}}), trainers)
    with pytest.raises(ConfigError, match="names no stage"):
        stage_sources(_stages({}), trainers)


def test_a_misspelt_override_in_a_later_stage_fails_before_the_first_trains(tmp_path):
    with pytest.raises(ConfigError, match=r"stages.dpo \(dpo.py"):
        _chain(tmp_path, "recipe=scope_sft_then_dpo_tiny", "stages.dpo.extra=['algo.betta=0.2']")
    assert not (tmp_path / "stages").exists()
    with pytest.raises(ConfigError, match=r"(?s)stages.sft \(sft.py.*data.train_path"):  # the paper chain needs data
        _chain(tmp_path, "recipe=box2_qwen3_4b")


def test_start_weights_of_a_stage(tmp_path):
    from recipes.stages import StageRunner

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


def _box2_chain(run_dir, env=None, args=(), **popen):
    cmd = [sys.executable, str(ROOT / "recipes" / "chain.py"), "recipe=box2_tiny", f"trainer.run_dir={run_dir}",
           "common=['trainer.progress=false']", *args]
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


# -- issue 25: a stage is pinned to what it started from; a lost final/ is not finished -------------------
def test_a_stage_on_a_retrained_earlier_stage_is_refused_naming_both_hashes_or_rerun(tmp_path):
    """The issue's scenario: run the chain, delete stage sft (what the config-change message says), rerun with
    another SFT learning rate. SFT is retrained; the DPO stage on the old SFT weights must not be skipped."""
    fast = [*FAST[1:], "stages.sft.extra=['trainer.max_steps=2','eval=none','data.train_path=toy:0/box2_sft.jsonl']"]
    _chain(tmp_path, "recipe=scope_sft_then_dpo_tiny", *fast)
    old_sft = json.loads((tmp_path / "stages" / "dpo" / "stage_start.json").read_text())["model.init_adapter"]
    dpo_adapter = (tmp_path / "stages" / "dpo" / "final" / "adapter_model.safetensors").read_bytes()
    import shutil

    shutil.rmtree(tmp_path / "stages" / "sft")
    lr = [o.replace("'eval=none'", "'eval=none','optim.lr=1.0e-2'") for o in fast]
    with pytest.raises(ConfigError) as e:
        _chain(tmp_path, "recipe=scope_sft_then_dpo_tiny", *lr)
    from recipes.stages.start import weights_sha256

    new_sft = weights_sha256(tmp_path / "stages" / "sft" / "final")
    assert new_sft != old_sft["sha256"]
    assert "stage 'dpo'" in str(e.value) and old_sft["sha256"] in str(e.value) and new_sft in str(e.value)
    assert "trainer.rerun_stale_stages=true" in str(e.value)
    assert (tmp_path / "stages" / "dpo" / "final" / "adapter_model.safetensors").read_bytes() == dpo_adapter

    records = _chain(tmp_path, "recipe=scope_sft_then_dpo_tiny", *lr, "trainer.rerun_stale_stages=true")
    assert [r["status"] for r in records.values()] == ["skipped", "trained"]
    assert json.loads((tmp_path / "stages" / "dpo" / "stage_start.json").read_text())[
        "model.init_adapter"]["sha256"] == new_sft
    assert (tmp_path / "stages" / "dpo.old-1" / "final" / "adapter_model.safetensors").read_bytes() == dpo_adapter
    assert "dpo: its start changed since it trained" in (tmp_path / "chain.log").read_text()  # written under the lock


class _FakeStages:
    """A StageRunner over fake trainers: each writes final/ (weights from its start), a complete checkpoint and
    run_complete.json, as a real stage does (moving a previous run aside under trainer.overwrite=true, as
    ``setup_run`` does); ``calls`` lists (stage, resumed)."""

    def __init__(self, root, base):
        from recipes.stages import StageRunner

        self.calls, self.logs, self.base = [], [], base
        self.runner = StageRunner(root, seed=0, compose=self.compose, runners={"sft": self.train, "dpo": self.train},
                                  log=self.logs.append)

    def compose(self, script, overrides):
        kv = dict(o.split("=", 1) for o in overrides)
        return OmegaConf.create({"model": {"path": kv.get("model.path", str(self.base)).strip("'"),
                                           "init_adapter": kv.get("model.init_adapter", "").strip("'") or None,
                                           "init_adapter_mode": "merge"},
                                 "trainer": {"run_dir": "set by the runner", "resume": "auto",
                                             "overwrite": kv.get("trainer.overwrite") == "true"},
                                 "lr": kv.get("lr")})

    def train(self, cfg):
        import types

        from trainer.runtime.run_dir import prepare_fresh_or_refuse

        run = __import__("pathlib").Path(cfg.trainer.run_dir)
        run.mkdir(parents=True, exist_ok=True)
        prepare_fresh_or_refuse(run, cfg.trainer)  # trainer.overwrite=true moves a previous run aside, as setup_run
        ckpt = run / "checkpoints" / "step_2"
        resumed = ckpt.joinpath("COMPLETE").exists()
        self.calls.append((run.name, resumed))
        (run / "final").mkdir(parents=True, exist_ok=True)
        (run / "final" / "adapter_config.json").write_text("{}")
        start = (cfg.model.init_adapter or cfg.model.path) + str(cfg.lr)
        (run / "final" / "adapter_model.safetensors").write_text(start)
        ckpt.mkdir(parents=True, exist_ok=True)
        (ckpt / "COMPLETE").write_text("")
        (run / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
        (run / "run_complete.json").write_text(json.dumps({"step": 2}))
        return types.SimpleNamespace(stopped_early=False, step=2)

    def run(self, lr=None):
        from recipes.stages import chain_stages

        stages = _stages({"sft": {"script": "sft", "init_from": None, "extra": [f"lr={lr}"] if lr else []},
                          "dpo": {"script": "dpo"}})
        self.calls.clear()
        self.runner.run_all(chain_stages(stages, [], ("sft", "dpo")))
        return {k: v["status"] for k, v in self.runner.records.items()}


def _base_model(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    (base / "model.safetensors").write_text("base weights")
    return base


def test_an_edited_base_model_makes_the_first_stage_stale(tmp_path):
    fake = _FakeStages(tmp_path / "run", _base_model(tmp_path))
    assert fake.run() == {"sft": "trained", "dpo": "trained"}
    assert fake.run() == {"sft": "skipped", "dpo": "skipped"}
    (tmp_path / "base" / "model.safetensors").write_text("other base weights")
    with pytest.raises(ConfigError, match=r"(?s)stage 'sft'.*model.path: .*base: sha256 when the stage started "
                                          r"[0-9a-f]{64} .* != now [0-9a-f]{64}"):
        fake.run()


def test_a_deleted_final_is_resumed_from_its_checkpoint_or_retrained(tmp_path):
    import shutil

    fake = _FakeStages(tmp_path / "run", _base_model(tmp_path))
    fake.run()
    sft = tmp_path / "run" / "stages" / "sft"
    shutil.rmtree(sft / "final")  # run_complete.json is still there
    assert fake.run() == {"sft": "resumed", "dpo": "skipped"}  # same final/ again: DPO's start still holds
    assert fake.calls == [("sft", True)]
    assert any("sft: run_complete.json exists but" in m and "not finished; resuming from" in m for m in fake.logs)

    shutil.rmtree(sft / "final")
    shutil.rmtree(sft / "checkpoints")
    fake.logs.clear()
    assert fake.run() == {"sft": "trained", "dpo": "skipped"}
    assert any("no complete checkpoint is left: not finished; retraining" in m for m in fake.logs)
    assert (tmp_path / "run" / "stages" / "sft.old-1" / "run_complete.json").exists()


def test_a_stage_with_only_a_torn_checkpoint_says_training_not_resuming(tmp_path):
    fake = _FakeStages(tmp_path / "run", _base_model(tmp_path))
    (tmp_path / "run" / "stages" / "sft" / "checkpoints" / ".tmp-step_2").mkdir(parents=True)
    fake.run()
    assert any(m.startswith("sft: training (") for m in fake.logs), fake.logs
    assert not any(m.startswith("sft: resuming") for m in fake.logs)


@pytest.mark.slow
def test_box2_chain_with_sft_deleted_and_retrained_refuses_the_old_grpo_stage(tmp_path):
    """The issue's exact commands (shortened stages): recipes/chain.py recipe=box2_tiny to the end; rm -rf
    stages/sft; rerun with stages.sft.extra=['optim.lr=1.0e-2']. SFT retrains, GRPO is refused (exit 1) naming
    both hashes, not skipped; with trainer.rerun_stale_stages=true GRPO retrains and the chain exits 0."""
    import shutil

    short = ["stages.sft.extra=['trainer.max_steps=3','eval=none','data.train_path=toy:0/box2_sft.jsonl']",
             "stages.grpo.extra=['trainer.max_steps=2','eval=none']"]

    def chain(*extra):
        proc = _box2_chain(tmp_path, args=[*short, *extra])
        out, _ = proc.communicate(timeout=900)
        return proc.returncode, out

    code, out = chain()
    assert code == 0, out[-3000:]
    grpo_adapter = (tmp_path / "stages" / "grpo" / "final" / "adapter_model.safetensors").read_bytes()
    shutil.rmtree(tmp_path / "stages" / "sft")
    lr = [s.replace("'eval=none'", "'eval=none','optim.lr=1.0e-2'") if "stages.sft" in s else s for s in short]
    short[:] = lr
    code, out = chain()
    assert code == 2 and "grpo: already complete" not in out, out[-3000:]
    assert "stage 'grpo'" in out and "sha256 when the stage started" in out and "rerun_stale_stages" in out
    assert (tmp_path / "stages" / "grpo" / "final" / "adapter_model.safetensors").read_bytes() == grpo_adapter
    code, out = chain("trainer.rerun_stale_stages=true")
    assert code == 0 and "grpo: its start changed since it trained" in out and "sft: already complete" in out
