"""The exit rule after a stop signal (issue 25): SIGTERM saves a checkpoint and the entry point exits 0 (so a
requeue wrapper reruns it; 1 would mean a failure), for every recipe, the distillation pipeline and the
chain runner. In-process, tiny models on CPU: SIGTERM is sent to this process at the end of step 2, through
the same handler a real signal meets. (GRPO with a hung reward: tests/trainer/runtime/test_run_safety.py, slow.)"""

from __future__ import annotations

import os
import signal

import pytest

import dist_helpers as dh
from recipe_utils import CONF, load_recipe, reset_accelerate, run_recipe


@pytest.fixture(autouse=True)
def _one_thread():
    yield from dh.one_torch_thread()


@pytest.fixture()
def sigterm_at_step_2(monkeypatch):
    import trainer.runtime.loop as loop

    real = loop._step_record

    def record_then_sigterm(ctx, state, source, *, step, **kw):
        if step == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(ctx, state, source, step=step, **kw)

    monkeypatch.setattr(loop, "_step_record", record_then_sigterm)


def _exit_code(fn) -> int:
    """The process exit code ``fn`` would give as an entry point's body: 0 when it returns."""
    try:
        fn()
    except SystemExit as e:
        return 0 if e.code is None else e.code if isinstance(e.code, int) else 1  # a message exits 1
    return 0


@pytest.mark.parametrize("recipe, overrides", [
    ("sft", ["recipe=box2_sft_tiny", "data.train_path=toy:0/box2_sft.jsonl"]),
    ("dpo", ["recipe=scope_tiny"]),
])
def test_sigterm_in_a_recipe_saves_a_checkpoint_and_exits_0(tmp_path, sigterm_at_step_2, recipe, overrides):
    run = tmp_path / "run"
    result = {}
    code = _exit_code(lambda: result.setdefault("r", run_recipe(recipe, recipe, [
        *overrides, f"trainer.run_dir={run}", "trainer.max_steps=5", "eval=none", "trainer.progress=false",
        "trainer.save_every=0"])))
    assert code == 0 and result["r"].preempted and result["r"].step == 2
    assert (run / "checkpoints" / "step_2" / "COMPLETE").exists() and not (run / "run_complete.json").exists()


def test_sigterm_in_the_distillation_pipeline_exits_0(tmp_path, sigterm_at_step_2, capsys):
    from eval_hooks.builders.taste_toy import make_taste_toy
    from eval_hooks.folds import split_task_folds
    from selectrust.core.io import write_jsonl_atomic

    train, test = split_task_folds(list(enumerate(make_taste_toy(0, n_tasks=6).items, 1)), 2, 0)
    write_jsonl_atomic(tmp_path / "train.jsonl", train)
    write_jsonl_atomic(tmp_path / "test.jsonl", test)
    over = ["recipe=taste_tiny", "data.source=files", f"data.train_path={tmp_path / 'train.jsonl'}",
            f"data.eval_path={tmp_path / 'test.jsonl'}", "model.path=tiny", f"trainer.run_dir={tmp_path / 'run'}",
            "algo.mode=on_policy", "algo.max_reasoning_tokens=8", "algo.max_positions=3", "algo.topk=5",
            "optim.batch_size=8", "trainer.max_steps=5", "trainer.save_every=0", "eval.enabled=false",
            "trainer.progress=false"]
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from trainer.config import register_schemas

    register_schemas()
    reset_accelerate()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):  # the stages compose their configs too
        cfg = hydra_compose(config_name="distill", overrides=over)
        assert _exit_code(lambda: load_recipe("distill").pipeline(cfg, overrides=over[1:])) == 0
    assert "stage stage1 stopped early (its checkpoint is saved)" in capsys.readouterr().out
    assert (tmp_path / "run" / "stages" / "stage1" / "checkpoints" / "step_2" / "COMPLETE").exists()


def test_sigterm_in_a_chain_exits_0_and_the_same_command_continues(tmp_path, sigterm_at_step_2):
    from tests.recipes.test_chain import FAST, _chain

    assert _exit_code(lambda: _chain(tmp_path, "recipe=scope_sft_then_dpo_tiny", *FAST)) == 0
    assert (tmp_path / "stages" / "sft" / "checkpoints" / "step_2" / "COMPLETE").exists()
    assert not (tmp_path / "stages" / "dpo").exists()
