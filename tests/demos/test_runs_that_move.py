"""Runs that move (issue 51, Deliver 4): a demo's stage configs name paths inside its out dir and the model by its
cache entry's directory, so a copied or moved out dir, or another ``SELECTRUST_CACHE`` holding the same entry,
re-ran every stage. Configs are now compared with both written portably (trainer/runtime/relocation.py): the copy
reuses every finished stage, and one cut short resumes where it stopped.

The toy demo's own stage list runs with fake recipes (``test_demo_out_dir.ToyFakes``); a real tiny DPO stage checks
a real recipe's config and the trainer's own resume check."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from recipes.stages import StageRunner
from test_demo_out_dir import CLEAN, Fakes, ToyFakes, _tree

ENTRY = "tiny-0123456789ab"  # a model cache entry's name: its content key


@pytest.fixture(autouse=True)
def _clean_checkout(monkeypatch):
    monkeypatch.setattr("trainer.runtime.provenance.git_commit", lambda *a, **k: CLEAN)


def test_portable_configs_name_the_out_dir_and_cache_entries_wherever_they_are(tmp_path):
    from trainer.runtime.relocation import moved_roots, portable_pair

    a = {"out_dir": "/a/run/stages/eval", "model": {"path": "/c1/gguf-0123456789abcdef"},
         "overrides": ["data.train_path='/a/run/stages/mine/pairs.jsonl'"], "eval": {"path": "/a/run2/x.jsonl"}}
    b = {"out_dir": "/b/copy/stages/eval", "model": {"path": "/c2/gguf-0123456789abcdef"},
         "overrides": ["data.train_path='/b/copy/stages/mine/pairs.jsonl'"], "eval": {"path": "/a/run2/x.jsonl"}}
    assert moved_roots("/a/run/stages/eval", "/b/copy/stages/eval") == (Path("/a/run"), Path("/b/copy"))
    assert moved_roots("/a/run", "/a/run") == (None, None) and moved_roots("/a/x", "/b/y") == (None, None)
    saved, now = portable_pair(a, b, "out_dir")
    assert saved == now and now["overrides"] == ["data.train_path='<out>/stages/mine/pairs.jsonl'"]
    assert now["model"]["path"] == "<cache>/gguf-0123456789abcdef"
    assert now["eval"]["path"] == "/a/run2/x.jsonl"  # another directory that merely starts alike: not the out dir
    other = {**b, "model": {"path": "/c2/gguf-fedcba9876543210"}}  # another entry: other weights
    assert portable_pair(a, other, "out_dir")[0] != portable_pair(a, other, "out_dir")[1]


def test_a_stage_continuing_an_adapter_reads_its_start_where_the_out_dir_and_cache_are_now(tmp_path, monkeypatch):
    """``started_from``: the base a continued adapter sat on, from its stage's saved config.yaml, as it reads after
    the out dir moved (a path inside it) or the cache did (an entry gone from the old cache, held by this one)."""
    from omegaconf import OmegaConf

    from trainer.runtime.relocation import started_from

    stage = tmp_path / "b" / "out" / "stages" / "scope"
    stage.mkdir(parents=True)
    monkeypatch.setenv("SELECTRUST_CACHE", str(tmp_path / "cache_b"))
    (tmp_path / "cache_b" / "gguf-0123456789abcdef").mkdir(parents=True)
    saved = {"trainer": {"run_dir": str(tmp_path / "a" / "out" / "stages" / "scope")},
             "model": {"path": str(tmp_path / "cache_a" / "gguf-0123456789abcdef"),
                       "init_adapter": str(tmp_path / "a" / "out" / "stages" / "sft" / "final")}}
    (stage / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(saved)))
    model = started_from(stage)
    assert model.path == str(tmp_path / "cache_b" / "gguf-0123456789abcdef")
    assert model.init_adapter == str(tmp_path / "b" / "out" / "stages" / "sft" / "final")
    (tmp_path / "cache_a" / "gguf-0123456789abcdef").mkdir(parents=True)  # the old cache still holds it: kept
    assert started_from(stage).path == saved["model"]["path"]


def _model(cache: Path) -> Path:
    """A model cache entry (fake weights) under ``cache``."""
    d = cache / ENTRY
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_text("base weights")
    return d


class MovableToyFakes(ToyFakes):
    """ToyFakes whose base model is a cache entry, and whose fake weights do not name the directory they are in."""

    def __init__(self, init: Path):
        super().__init__()
        self.init = str(init)

    def train(self, cfg):
        """``ToyFakes.train`` with its full fine-tune told by the base model's path."""
        import hashlib
        import types

        from omegaconf import OmegaConf
        from trainer.runtime.run_dir import prepare_fresh_or_refuse

        run = Path(cfg.trainer.run_dir)
        run.mkdir(parents=True, exist_ok=True)
        prepare_fresh_or_refuse(run, cfg.trainer)
        self.calls.append(run.name)
        (run / "final").mkdir()
        full = cfg.model.path == self.init
        (run / "final" / ("config.json" if full else "adapter_config.json")).write_text("{}")
        made = f"{Path(cfg.model.init_adapter or cfg.model.path).name} {len(cfg.overrides)}"
        (run / "final" / ("model.safetensors" if full else "adapter_model.safetensors")).write_text(
            hashlib.sha256(made.encode()).hexdigest())
        (run / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
        (run / "run_complete.json").write_text(json.dumps({"step": 2}))
        return types.SimpleNamespace(stopped_early=False, step=2)

    def run(self, out, **toy):
        from demos.common import DemoRun
        from demos.toy.pipeline import ToyStages
        from test_demo_out_dir import _demo_cfg
        from omegaconf import OmegaConf

        cfg = _demo_cfg(out, demo="toy")
        cfg.toy = OmegaConf.merge(cfg.toy, {"misleading_only": False, "knowledge_aware": False, **toy})
        runners = {"sft": self.train, "dpo": self.train, "grpo": self.train, "evaluate": self.evaluate,
                   "mine_pairs": self.mine}
        demo = DemoRun(cfg, compose=self.compose, runners=runners, checks={}, threads=None,
                       stage_runner=StageRunner)
        self.calls.clear()
        return demo.run(ToyStages(cfg, self.init).all(), lambda results: {"seed": cfg.seed, "results": results},
                        lambda summary, where: None, lambda summary: None)


def test_a_copied_demo_out_dir_with_another_cache_reuses_every_stage(tmp_path, capsys):
    fake = MovableToyFakes(_model(tmp_path / "cache_a"))
    first = fake.run(tmp_path / "a" / "out")
    order = list(fake.calls)
    assert "base_sft" in order and "grpo" in order and "box2_eval_grpo" in order
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.copytree(tmp_path / "cache_a", tmp_path / "cache_b")
    shutil.rmtree(tmp_path / "a")  # moved: nothing may read the old place
    shutil.rmtree(tmp_path / "cache_a")
    before = _tree(tmp_path / "b" / "out" / "stages")
    capsys.readouterr()
    moved = MovableToyFakes(tmp_path / "cache_b" / ENTRY)
    summary = moved.run(tmp_path / "b" / "out")
    said = capsys.readouterr().out
    assert moved.calls == [], said
    assert sorted(summary["reused_stages"]) == sorted(order)
    evaluated = {k: v for k, v in first["results"].items() if isinstance(v, dict)}
    assert evaluated and {k: summary["results"][k] for k in evaluated} == evaluated  # read back as they were
    assert _tree(tmp_path / "b" / "out" / "stages") == before  # nothing retrained, moved aside or rewritten


def test_a_copy_with_other_base_weights_under_the_same_entry_name_retrains_from_them(tmp_path, capsys):
    """The portable form names a cache entry by its name; the weights themselves stay pinned by content."""
    fake = MovableToyFakes(_model(tmp_path / "cache_a"))
    fake.run(tmp_path / "a" / "out", box2=False)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    (_model(tmp_path / "cache_b") / "model.safetensors").write_text("other base weights")
    moved = MovableToyFakes(tmp_path / "cache_b" / ENTRY)
    capsys.readouterr()
    moved.run(tmp_path / "b" / "out", box2=False)
    said = [x for x in capsys.readouterr().out.splitlines() if "base_sft: its start changed since it trained" in x]
    assert moved.calls[0] == "base_sft" and len(said) == 1 and "retraining" in said[0]


@pytest.fixture
def one_torch_thread():
    import dist_helpers as dh

    yield from dh.one_torch_thread()


def _tiny_demo(root: Path, cache: Path, fakes: Fakes, *extra: str):
    """A data step writing DPO pairs into the out dir, a real tiny DPO stage on them from the model in ``cache``, and
    a (fake) evaluation of its adapter; returns the runner's results."""
    import dist_helpers as dh
    from recipe_utils import compose, load_recipe
    from recipes.stages import StageRunner
    from trainer.runtime.stage import Stage

    def compose_any(recipe, overrides):
        return compose(recipe, overrides) if recipe == "dpo" else fakes.compose(recipe, overrides)

    def data(out: Path) -> Path:
        out.mkdir(parents=True, exist_ok=True)
        dh.write_pairs(out / "pairs.jsonl", 5)
        (out / "items.txt").write_text("a b c")
        return out

    runner = StageRunner(root, seed=0, compose=compose_any, prefix="[demo]", rerun_changed=True,
                         runners={"dpo": load_recipe("dpo").run, "evaluate": fakes.evaluate})
    return runner, runner.run_all([
        Stage("data", call=data),
        Stage("scope", "dpo", [f"model.path={cache / 'tiny-465860ccaf1a'}", "eval=none", "trainer.progress=false",
                               "trainer.save_every=1", "optim.batch_size=4", "optim.grad_accum=1",
                               "trainer.max_steps=2", *extra], inputs={"data.train_path": "data/pairs.jsonl"}),
        Stage("eval_scope", "evaluate", ["model.path=m1"], inputs={"eval.path": "data/items.txt",
                                                                   "adapter_path": "scope"})])


def test_a_moved_run_of_a_real_recipe_is_reused_and_one_cut_short_resumes(tmp_path, tiny_model_dir, capsys,
                                                                          one_torch_thread):
    shutil.copytree(tiny_model_dir, tmp_path / "cache_a" / "tiny-465860ccaf1a")
    fakes = Fakes()
    with pytest.raises(SystemExit) as e:  # stopped after step 1 (its checkpoint saved): exit 0, as a preemption
        _tiny_demo(tmp_path / "a", tmp_path / "cache_a", fakes, "trainer.stop_at_step=1")
    assert e.value.code == 0 and (tmp_path / "a" / "stages" / "scope" / "checkpoints" / "step_1").is_dir()
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.move(tmp_path / "cache_a", tmp_path / "cache_b")
    shutil.rmtree(tmp_path / "a")
    capsys.readouterr()
    runner, results = _tiny_demo(tmp_path / "b", tmp_path / "cache_b", fakes)  # the moved run continues
    said = capsys.readouterr().out
    assert runner.records["scope"]["status"] == "resumed" and runner.records["scope"]["step"] == 2, said
    assert "retraining" not in said and not list((tmp_path / "b" / "stages").glob("scope.old-*"))
    shutil.copytree(tmp_path / "b", tmp_path / "c")  # the finished copy: every stage reused
    shutil.move(tmp_path / "cache_b", tmp_path / "cache_c")
    shutil.rmtree(tmp_path / "b")
    runner, again = _tiny_demo(tmp_path / "c", tmp_path / "cache_c", fakes)
    assert runner.records["scope"]["status"] == "skipped" and runner.records["eval_scope"]["status"] == "skipped"
    assert fakes.calls == ["eval_scope"] and again["eval_scope"] == results["eval_scope"]
