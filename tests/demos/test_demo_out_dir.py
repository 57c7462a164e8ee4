"""A demo's out dir keeps one run and never mixes runs (issue 33): the stage runner reuses a finished stage whose
provenance matches and reruns one whose inputs changed; ``demo.json`` records the demo, seed and settings, and
another seed or settings is refused in one line (``overwrite=true`` moves the old run aside); a second demo into a
busy out dir is refused by its lock; Ctrl-C or SIGTERM during a stage ends in one line with a truthful exit code.

Fast tests drive the stage runner and ``demos.common.DemoRun`` with fake recipes; the slow ones run the toy demo
itself (``python recipes/demo.py demo=toy`` with short stages) through the scenarios of the issue."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from recipe_utils import ROOT
from recipes.stages import StageRunner

CLEAN = "c0ffee" * 6 + "c0ff"  # a clean commit: the checkout these tests run in may hold uncommitted changes


@pytest.fixture(autouse=True)
def _clean_checkout(monkeypatch):
    """The demos' provenance names the git commit of the checkout, and a dirty tree matches no other run
    (trainer/runtime/provenance.py); the tests of reuse pin a clean commit so they do not depend on the checkout's
    state (the provenance tests below change it on purpose)."""
    monkeypatch.setattr("trainer.runtime.provenance.git_commit", lambda *a, **k: CLEAN)


# -- fakes: an "evaluate" recipe (a config with out_dir) and a data step ------------------------------------------
class Fakes:
    """``evaluate`` counts its calls and writes metrics.json; ``data`` writes items.txt with ``self.items``."""

    def __init__(self):
        self.calls: list[str] = []
        self.items = "a b c"
        self.during_eval = None  # called inside the evaluation (to interrupt it)

    @staticmethod
    def compose(recipe: str, overrides: list[str]):
        return OmegaConf.merge({"out_dir": "", "seed": 0, "eval": {"path": None}, "model": {"path": None}},
                               OmegaConf.from_dotlist(list(overrides)))

    def evaluate(self, cfg) -> dict:
        self.calls.append(Path(cfg.out_dir).name)
        if self.during_eval is not None:
            self.during_eval()
        n = len(Path(cfg.eval.path).read_text().split())
        Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
        (Path(cfg.out_dir) / "metrics.json").write_text(json.dumps({"n": n, "model": cfg.model.path}))
        return {"n": n, "model": cfg.model.path}

    def data(self, out: Path) -> Path:
        out.mkdir(parents=True, exist_ok=True)
        (out / "items.txt").write_text(self.items)
        return out

    def stages(self, model: str = "m1"):
        from trainer.runtime.stage import Stage

        return [Stage("data", call=self.data),
                Stage("eval_base", "evaluate", [f"model.path={model}"], inputs={"eval.path": "data/items.txt"})]


def _runner(root, fakes, **kw):
    from recipes.stages import StageRunner

    return StageRunner(root, seed=0, compose=fakes.compose, runners={"evaluate": fakes.evaluate}, prefix="[demo]", **kw)


def test_a_finished_stage_is_reused_while_its_provenance_matches_and_rerun_when_it_does_not(tmp_path):
    fakes = Fakes()
    assert _runner(tmp_path, fakes).run_all(fakes.stages())["eval_base"] == {"n": 3, "model": "m1"}
    record = json.loads((tmp_path / "stages" / "eval_base" / "stage_complete.json").read_text())
    assert record["recipe"] == "evaluate" and record["config"]["model"]["path"] == "m1"
    assert record["inputs"]["eval.path"]["sha256"] == hashlib.sha256(b"a b c").hexdigest()

    runner = _runner(tmp_path, fakes)  # the same command again: the evaluation is reused, its result too
    assert runner.run_all(fakes.stages())["eval_base"] == {"n": 3, "model": "m1"}
    assert fakes.calls == ["eval_base"] and runner.records["eval_base"]["status"] == "skipped"

    fakes.items = "a b c d"  # an input that changed: run again, the earlier run moved aside (kept)
    assert _runner(tmp_path, fakes).run_all(fakes.stages())["eval_base"]["n"] == 4
    assert json.loads((tmp_path / "stages" / "eval_base.old-1" / "metrics.json").read_text())["n"] == 3
    assert _runner(tmp_path, fakes).run_all(fakes.stages(model="m2"))["eval_base"]["model"] == "m2"  # a setting
    assert fakes.calls == ["eval_base"] * 3 and (tmp_path / "stages" / "eval_base.old-2").is_dir()


def test_a_truncated_completion_record_reruns_the_stage_in_one_line_and_keeps_the_old_one(tmp_path, capsys):
    """Issue 42 #11: a cut-short stage_complete.json gave a JSONDecodeError traceback naming no file. It is no
    completion: the stage runs again (one line naming the file), the earlier directory moved aside, not lost."""
    fakes = Fakes()
    _runner(tmp_path, fakes).run_all(fakes.stages())
    record = tmp_path / "stages" / "eval_base" / "stage_complete.json"
    record.write_text(record.read_text()[:40])
    capsys.readouterr()
    assert _runner(tmp_path, fakes).run_all(fakes.stages())["eval_base"] == {"n": 3, "model": "m1"}
    said = [line for line in capsys.readouterr().out.splitlines() if "eval_base: not complete" in line]
    assert len(said) == 1 and str(record) in said[0] and "running it again" in said[0]
    assert fakes.calls == ["eval_base"] * 2
    assert (tmp_path / "stages" / "eval_base.old-1" / "metrics.json").is_file()
    assert json.loads(record.read_text())["result"] == {"n": 3, "model": "m1"}  # recorded anew


def test_a_hand_edited_result_is_not_believed_the_stage_s_own_file_is(tmp_path, capsys):
    """Issue 42 #12: a recorded result edited by hand (SC2W 0.074 -> 0.0) was reused and shown in summary.json and
    report.md. The result is read from the stage's own metrics.json, checked against its recorded hash."""
    fakes = Fakes()
    _runner(tmp_path, fakes).run_all(fakes.stages())
    path = tmp_path / "stages" / "eval_base" / "stage_complete.json"
    record = json.loads(path.read_text())
    assert record["result_file"] == "metrics.json" and set(record["outputs"]) == {"metrics.json"}
    record["result"]["n"] = 0
    path.write_text(json.dumps(record))
    capsys.readouterr()
    runner = _runner(tmp_path, fakes)
    assert runner.run_all(fakes.stages())["eval_base"] == {"n": 3, "model": "m1"}
    assert fakes.calls == ["eval_base"] and runner.records["eval_base"]["status"] == "skipped"  # not run again
    said = [line for line in capsys.readouterr().out.splitlines() if "edited by hand" in line]
    assert len(said) == 1 and "metrics.json" in said[0]


@pytest.mark.parametrize("edit", ["metrics", "extra_file_removed", "old_record"])
def test_a_stage_whose_outputs_do_not_match_their_hashes_runs_again_and_keeps_the_old_one(tmp_path, capsys, edit):
    """An output edited (both the record and metrics.json, consistently) or missing, or a record without output
    hashes: not reused; run again, the earlier directory moved aside."""
    fakes = Fakes()
    _runner(tmp_path, fakes).run_all(fakes.stages())
    stage = tmp_path / "stages" / "eval_base"
    path = stage / "stage_complete.json"
    record = json.loads(path.read_text())
    if edit == "metrics":
        (stage / "metrics.json").write_text(json.dumps({"n": 0, "model": "m1"}))
        record["result"]["n"] = 0
    elif edit == "extra_file_removed":
        (stage / "item_scores.jsonl").write_text("{}\n")
        record = json.loads(path.read_text()) | {"outputs": {**record["outputs"], "item_scores.jsonl": "0" * 64}}
        (stage / "item_scores.jsonl").unlink()
    else:
        del record["outputs"]
    path.write_text(json.dumps(record))
    capsys.readouterr()
    assert _runner(tmp_path, fakes).run_all(fakes.stages())["eval_base"] == {"n": 3, "model": "m1"}
    assert fakes.calls == ["eval_base"] * 2
    said = [line for line in capsys.readouterr().out.splitlines() if "eval_base: not reused" in line]
    assert len(said) == 1 and "running it again" in said[0]
    assert (tmp_path / "stages" / "eval_base.old-1" / "stage_complete.json").is_file()


def test_a_result_no_file_holds_is_checked_against_its_hash(tmp_path):
    """A recipe that writes no JSON file of its result: the recorded result is checked against its hash."""
    fakes = Fakes()
    plain = fakes.evaluate

    def evaluate(cfg):
        result = plain(cfg)
        (Path(cfg.out_dir) / "metrics.json").unlink()
        (Path(cfg.out_dir) / "metrics.txt").write_text(str(result))
        return result

    from recipes.stages import StageRunner

    def runner():
        return StageRunner(tmp_path, seed=0, compose=fakes.compose, runners={"evaluate": evaluate}, prefix="[demo]")

    runner().run_all(fakes.stages())
    path = tmp_path / "stages" / "eval_base" / "stage_complete.json"
    record = json.loads(path.read_text())
    assert record["result_file"] is None
    assert runner().run_all(fakes.stages())["eval_base"]["n"] == 3 and fakes.calls == ["eval_base"]
    record["result"]["n"] = 0
    path.write_text(json.dumps(record))
    assert runner().run_all(fakes.stages())["eval_base"]["n"] == 3 and fakes.calls == ["eval_base"] * 2


# -- issue 44: a finished stage is reused only while its provenance matches ----------------------------------------
def _prov(**change) -> dict:
    return {"precision": "fp32", "threads": 2, "git_commit": "a" * 40,
            "versions": {"torch": "2.4.0", "python": "3.11.9"}, **change}


def test_a_finished_stage_is_reused_only_while_its_provenance_matches(tmp_path, capsys):
    """Precision, threads, package versions and git commit each make a finished stage run again (the old one moved
    aside, one line naming the field); the same provenance reuses it."""
    fakes, made = Fakes(), {"now": _prov()}

    def runner(**kw):
        return _runner(tmp_path, fakes, provenance=lambda cfg: made["now"], **kw)

    runner().run_all(fakes.stages())
    stage = tmp_path / "stages" / "eval_base"
    assert json.loads((stage / "stage_complete.json").read_text())["provenance"] == _prov()
    again = runner()
    again.run_all(fakes.stages())
    assert fakes.calls == ["eval_base"] and again.records["eval_base"]["status"] == "skipped"
    assert again.made_under["eval_base"] == _prov()
    changes = [({"precision": "bf16"}, "precision: recorded fp32 != now bf16"),
               ({"threads": 1}, "threads: recorded 2 != now 1"),
               ({"versions": {"torch": "2.5.0", "python": "3.11.9"}}, "versions.torch: recorded 2.4.0 != now 2.5.0"),
               ({"git_commit": "b" * 40}, f"git_commit: recorded {'a' * 40} != now {'b' * 40}")]
    for n, (change, said) in enumerate(changes, start=1):
        made["now"] = _prov(**change)
        capsys.readouterr()
        assert runner().run_all(fakes.stages())["eval_base"] == {"n": 3, "model": "m1"}
        lines = [x for x in capsys.readouterr().out.splitlines() if "eval_base: its provenance differs" in x]
        assert len(lines) == 1 and said in lines[0] and "running it again" in lines[0], lines
        assert len(fakes.calls) == 1 + n and (tmp_path / "stages" / f"eval_base.old-{n}" / "metrics.json").is_file()
        assert json.loads((stage / "stage_complete.json").read_text())["provenance"] == made["now"]
        made["now"] = _prov()  # back: the record now holds the changed one, so it runs again
        runner().run_all(fakes.stages())
        fakes.calls.pop()


def test_a_dirty_tree_and_a_record_without_provenance_match_nothing_and_reuse_config_is_the_escape(tmp_path, capsys):
    fakes = Fakes()
    _runner(tmp_path, fakes).run_all(fakes.stages())  # a runner without provenance: an earlier version's record
    assert "provenance" not in json.loads((tmp_path / "stages" / "eval_base" / "stage_complete.json").read_text())
    capsys.readouterr()
    dirty = _prov(git_commit="a" * 40 + "-dirty")
    _runner(tmp_path, fakes, provenance=lambda cfg: dirty).run_all(fakes.stages())
    assert "its provenance differs from this run's (provenance not recorded" in capsys.readouterr().out
    _runner(tmp_path, fakes, provenance=lambda cfg: dirty).run_all(fakes.stages())  # the same dirty tree again
    assert "uncommitted changes matches no other run" in capsys.readouterr().out
    assert fakes.calls == ["eval_base"] * 3 and (tmp_path / "stages" / "eval_base.old-2").is_dir()

    runner = _runner(tmp_path, fakes, provenance=lambda cfg: _prov(threads=1), reuse="config")
    runner.run_all(fakes.stages())
    lines = [x for x in capsys.readouterr().out.splitlines() if "reuse=config" in x]
    assert fakes.calls == ["eval_base"] * 3 and runner.records["eval_base"]["status"] == "skipped"
    assert len(lines) == 1 and "threads: recorded 2 != now 1" in lines[0]
    assert runner.made_under["eval_base"] == dirty  # what the reused stage was made under, not now's


def test_summary_json_has_the_run_s_provenance_the_reuse_rule_and_stages_that_differ(tmp_path):
    from trainer.runtime.provenance import RECORDED, run_provenance

    out, fakes = tmp_path / "out", Fakes()
    summary = _demo(_demo_cfg(out), fakes)
    # the precision is what the stages ran in (issue 54), not what `auto` resolves to: the fake evaluation's config has
    # no precision setting, so none is known
    assert summary["provenance"] == {**run_provenance(), "precision": None, "stage_precision": {"eval_base": None}}
    assert set(summary["provenance"]) == {*RECORDED, "stage_precision"} and summary["provenance"]["cpu"]["flags"] is not None
    assert summary["provenance"]["git_commit"] == CLEAN and summary["reuse"] == "strict"
    assert "stage_provenance" not in summary  # every stage ran here, under this run's threads, commit and CPU
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["provenance"] == summary["provenance"] and on_disk["reuse"] == "strict"
    record = json.loads((out / "stages" / "eval_base" / "stage_complete.json").read_text())
    assert record["provenance"] == {**run_provenance(), "precision": None}
    assert _demo(_demo_cfg(out, reuse="config"), fakes)["reuse"] == "config"


def test_another_setting_of_the_same_demo_and_seed_reruns_only_the_stages_it_changes(tmp_path, capsys):
    """Issue 42 case 3: a settings change was refused as "other settings" (overwrite=true reran everything). It is
    accepted in one line naming the changed keys, demo.json is rewritten, a stage it does not change is reused."""
    out, fakes = tmp_path / "out", Fakes()
    _demo(_demo_cfg(out), fakes)
    capsys.readouterr()
    summary = _demo(_demo_cfg(out, grpo_rows="informative", transfer=False), fakes)
    said = [x for x in capsys.readouterr().out.splitlines() if "with changed settings" in x]
    assert len(said) == 1 and "settings.real.grpo_rows: saved 'all' != now 'informative'" in said[0]
    assert "settings.real.transfer: saved True != now False" in said[0]
    assert summary["reused_stages"] == ["eval_base"] and fakes.calls == ["eval_base"]
    saved = json.loads((out / "demo.json").read_text())["settings"]["real"]
    assert saved["grpo_rows"] == "informative" and saved["transfer"] is False


class ToyFakes:
    """Fake recipes for the toy demo's own stage list (``demos.toy.pipeline.ToyStages``): a training recipe writes
    ``final/`` whose weights depend on what it started from and on its overrides, ``config.yaml`` and
    ``run_complete.json`` (moving an earlier run aside under trainer.overwrite=true, as ``setup_run`` does); an
    evaluation or mining writes its result file. ``calls`` lists the stages run."""

    def __init__(self):
        self.calls: list[str] = []

    @staticmethod
    def compose(recipe: str, overrides: list[str]):
        kv = dict(o.split("=", 1) for o in overrides)
        cfg = {"seed": 0, "overrides": [o for o in overrides if not o.startswith(("model.", "trainer.overwrite"))],
               "model": {"path": kv.get("model.path", "").strip("'"),
                         "init_adapter": kv.get("model.init_adapter", "").strip("'") or None,
                         "init_adapter_mode": kv.get("model.init_adapter_mode", "merge")}}
        if recipe in ("sft", "dpo", "grpo"):
            cfg["trainer"] = {"run_dir": "", "resume": "auto", "overwrite": kv.get("trainer.overwrite") == "true"}
        else:
            cfg["out_dir"] = ""
        return OmegaConf.create(cfg)

    def train(self, cfg):
        import types

        from trainer.runtime.run_dir import prepare_fresh_or_refuse

        run = Path(cfg.trainer.run_dir)
        run.mkdir(parents=True, exist_ok=True)
        prepare_fresh_or_refuse(run, cfg.trainer)
        self.calls.append(run.name)
        (run / "final").mkdir()
        full = cfg.model.path.endswith("tiny")  # base_sft: full fine-tuning of the tiny model; the others LoRA
        (run / "final" / ("config.json" if full else "adapter_config.json")).write_text("{}")
        made = f"{cfg.model.init_adapter or cfg.model.path} {list(cfg.overrides)}"
        (run / "final" / ("model.safetensors" if full else "adapter_model.safetensors")).write_text(
            hashlib.sha256(made.encode()).hexdigest())
        (run / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
        (run / "run_complete.json").write_text(json.dumps({"step": 2}))
        return types.SimpleNamespace(stopped_early=False, step=2)

    def evaluate(self, cfg, name="metrics.json", result=None):
        out = Path(cfg.out_dir)
        self.calls.append(out.name)
        out.mkdir(parents=True, exist_ok=True)
        result = result or {"model": cfg.model.path, "adapter": cfg.get("adapter_path")}
        (out / name).write_text(json.dumps(result))
        (out / "knowledge.jsonl").write_text("{}\n")
        return result

    def mine(self, cfg):
        (Path(cfg.out_dir) / "pairs.jsonl").parent.mkdir(parents=True, exist_ok=True)
        (Path(cfg.out_dir) / "pairs.jsonl").write_text("{}\n")
        return self.evaluate(cfg, "mining_stats.json", {"kept": 1})

    def run(self, out, **toy):
        from demos.common import DemoRun
        from demos.toy.pipeline import ToyStages

        cfg = _demo_cfg(out, demo="toy")
        cfg.toy = OmegaConf.merge(cfg.toy, {"misleading_only": False, "knowledge_aware": False, **toy})
        runners = {"sft": self.train, "dpo": self.train, "grpo": self.train, "evaluate": self.evaluate,
                   "mine_pairs": self.mine}
        demo = DemoRun(cfg, compose=self.compose, runners=runners, checks={}, threads=None,
                       stage_runner=StageRunner)
        self.calls.clear()
        return demo.run(ToyStages(cfg, str(out.parent / "tiny")).all(), lambda results: {"seed": cfg.seed},
                        lambda summary, where: None, lambda summary: None)


def test_a_toy_stage_setting_changed_reruns_that_stage_and_what_it_feeds_and_reuses_the_rest(tmp_path, capsys):
    """Issue 42 case 3 on the toy demo's own stage list: fixing one stage's setting (``toy.stages.box2_sft``) after
    a full run retrains that stage (its old directory moved aside), reruns the stages that read or start from it,
    and reuses every other finished stage; nothing is deleted."""
    out, fake = tmp_path / "out", ToyFakes()
    fake.run(out)
    order = ["base_sft", "eval_base", "eval_base_unseen", "mine", "scope", "eval_scope", "eval_scope_unseen",
             "box2_eval_base", "box2_sft", "box2_eval_sft", "grpo", "box2_eval_grpo"]
    assert fake.calls == order
    before = _tree(out / "stages")
    capsys.readouterr()
    summary = fake.run(out, stages={"box2_sft": ["optim.lr=1.0e-3"]})
    said = capsys.readouterr().out
    assert fake.calls == ["box2_sft", "box2_eval_sft", "grpo", "box2_eval_grpo"]
    assert set(summary["reused_stages"]) == set(order) - set(fake.calls)
    assert "with changed settings (settings.toy.stages.box2_sft: saved [] != now ['optim.lr=1.0e-3'])" in said
    assert "box2_sft: its config changed since it finished (overrides" in said and "retraining" in said
    for name in fake.calls:  # each earlier run kept, whole, beside the new one
        old = {k.split("/", 1)[1]: v for k, v in before.items() if k.split("/", 1)[0] == name}
        assert _tree(out / "stages" / f"{name}.old-1") == old, name
    for name in set(order) - set(fake.calls):
        assert {k: v for k, v in _tree(out / "stages").items() if k.split("/", 1)[0] == name} == {
            k: v for k, v in before.items() if k.split("/", 1)[0] == name}, name


def test_a_training_stage_records_its_provenance_and_reruns_when_it_changes(tmp_path, capsys, monkeypatch):
    out, fake = tmp_path / "out", ToyFakes()
    fake.run(out, box2=False)
    record = json.loads((out / "stages" / "base_sft" / "stage_complete.json").read_text())
    assert record["training"] and record["recipe"] == "sft" and record["provenance"]["git_commit"] == CLEAN
    fake.run(out, box2=False)
    assert fake.calls == []
    monkeypatch.setattr("trainer.runtime.provenance.git_commit", lambda *a, **k: "f" * 40)
    capsys.readouterr()
    summary = fake.run(out, box2=False)
    assert fake.calls[:2] == ["base_sft", "eval_base"] and "reused_stages" not in summary
    assert f"base_sft: its provenance differs from this run's (git_commit: recorded {CLEAN} != now {'f' * 40})" in (
        capsys.readouterr().out)
    assert (out / "stages" / "base_sft.old-1" / "run_complete.json").is_file()


@pytest.mark.parametrize("interrupt, code, said", [
    ("ctrl_c", 130, "stage eval_base stopped by Ctrl-C before it finished"),
    ("sigterm", 0, "stage eval_base stopped by SIGTERM before it finished")])
def test_ctrl_c_or_sigterm_during_an_evaluation_ends_in_one_line(tmp_path, capsys, interrupt, code, said):
    def ctrl_c():
        raise KeyboardInterrupt

    def sigterm():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the signal arrives meanwhile

    fakes = Fakes()
    fakes.during_eval = ctrl_c if interrupt == "ctrl_c" else sigterm
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as e:
        _runner(tmp_path, fakes).run_all(fakes.stages())
    assert e.value.code == code and e.value.__suppress_context__  # no traceback of the interrupt
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith(f"[demo] {said}") and "run the same command again to continue" in out[-1]
    assert (tmp_path / "stages" / "data" / "items.txt").exists()  # the finished stage is kept
    assert not (tmp_path / "stages" / "eval_base" / "stage_complete.json").exists()  # the interrupted one is not done
    assert signal.getsignal(signal.SIGTERM) == handler and fakes.calls == ["eval_base"]




@pytest.fixture
def one_torch_thread():
    import dist_helpers as dh

    yield from dh.one_torch_thread()


def _train_then_evaluate(root: Path, fakes: Fakes, later: list):
    """A demo in small: a data step, a tiny DPO stage (``scope``), an evaluation of it (``transfer_scope``, by
    ``fakes``), then a step that appends to ``later``. Returns a function running all of it (the same command)."""
    import dist_helpers as dh
    from recipe_utils import compose, load_recipe
    from recipes.stages import StageRunner
    from trainer.runtime.stage import Stage

    pairs = dh.write_pairs(root / "pairs.jsonl", 5)

    def compose_any(recipe, overrides):
        return compose(recipe, overrides) if recipe == "dpo" else fakes.compose(recipe, overrides)

    def run():
        runner = StageRunner(root / "out", seed=0, compose=compose_any, prefix="[demo]",
                             runners={"dpo": load_recipe("dpo").run, "evaluate": fakes.evaluate})
        return runner.run_all([
            Stage("data", call=fakes.data),
            Stage("scope", "dpo", [f"data.train_path={pairs}", "eval=none", "trainer.progress=false",
                                   "trainer.save_every=0", "optim.batch_size=4", "optim.grad_accum=1",
                                   "trainer.max_steps=2"]),
            Stage("transfer_scope", "evaluate", ["model.path=m1"], inputs={"eval.path": "data/items.txt"}),
            Stage("grpo_prompts", call=lambda out: later.append(out))])

    return run


@pytest.mark.parametrize("sig, code, said", [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 0, "SIGTERM")])
def test_a_stop_signal_during_an_evaluation_after_a_training_stage_ends_the_demo(tmp_path, capsys, one_torch_thread,
                                                                                sig, code, said):
    """The real demo's report: Ctrl-C (``kill -INT``) during ``transfer_scope``, an evaluation after the SCOPE arm
    trained in the same process, was ignored; the evaluation ran to its end and the next stages ran. The demo had
    been started in the background by a non-interactive shell, so it inherited SIGINT ignored: the training loop
    takes SIGINT whatever it inherited (and hands back what it found), every other stage kept it ignored. Here: a
    tiny DPO stage, then an evaluation that signals itself, then a stage that must not run; then the same command
    again continues (the trained stage reused, the evaluation and the later stage run)."""
    fakes, later = Fakes(), []

    def signal_self():
        os.kill(os.getpid(), sig)
        for _ in range(100):  # the signal arrives meanwhile; an evaluation it did not stop runs on to its end
            time.sleep(0.05)

    run = _train_then_evaluate(tmp_path, fakes, later)
    inherited = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as `python recipes/demo.py ... &` from a script
    try:
        fakes.during_eval = signal_self
        with pytest.raises(SystemExit) as e:
            run()
        assert e.value.code == code and e.value.__suppress_context__
        out = capsys.readouterr().out.strip().splitlines()
        assert out[-1].startswith(f"[demo] stage transfer_scope stopped by {said} before it finished"), out[-3:]
        assert "run the same command again to continue" in out[-1]
        assert not any(line.startswith("[demo] transfer_scope: ") for line in out)  # not recorded as finished
        assert later == [] and fakes.calls == ["transfer_scope"]
        assert (tmp_path / "out" / "stages" / "scope" / "run_complete.json").exists()  # the finished stage is kept
        assert not (tmp_path / "out" / "stages" / "transfer_scope" / "stage_complete.json").exists()
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # what the process inherited is handed back

        fakes.during_eval = None  # the same command again continues
        results = run()
        out = capsys.readouterr().out
        assert "[demo] scope: already complete" in out and results["transfer_scope"]["n"] == 3
        assert fakes.calls == ["transfer_scope"] * 2 and len(later) == 1
    finally:
        signal.signal(signal.SIGINT, inherited)


@pytest.mark.parametrize("sig, code, said", [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 0, "SIGTERM")])
def test_a_stop_signal_while_a_training_stage_finishes_stops_before_the_next_stage(tmp_path, capsys, monkeypatch,
                                                                                  one_torch_thread, sig, code, said):
    """A stop signal that reaches a training stage after its loop last looked at the flag (while it saves its last
    step; the same holds for its final evaluation, which can take minutes) only set the flag: the stage finished
    and the next stages ran. The stage is complete: the runner keeps it and stops before the next stage."""
    import trainer.runtime.checkpoint as checkpoint
    import trainer.runtime.interrupt as interrupt

    real_save = checkpoint.CheckpointManager.save

    def save_then_signal(self, step, **kwargs):
        real_save(self, step, **kwargs)
        if step == 2:  # the last step's checkpoint, after the loop's look at the flag
            os.kill(os.getpid(), sig)

    monkeypatch.setattr(checkpoint.CheckpointManager, "save", save_then_signal)
    fakes, later = Fakes(), []
    run = _train_then_evaluate(tmp_path, fakes, later)
    try:
        with pytest.raises(SystemExit) as e:
            run()
    finally:
        assert not interrupt.requested()  # the loop spent the stop: later runs in this process start clean
    assert e.value.code == code
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith(f"[demo] stage scope finished; stopped by {said} before the next stage"), out[-3:]
    assert "run the same command again to continue" in out[-1]
    assert fakes.calls == [] and later == []
    assert (tmp_path / "out" / "stages" / "scope" / "run_complete.json").exists()

    monkeypatch.setattr(checkpoint.CheckpointManager, "save", real_save)
    results = run()  # the same command again continues after the finished stage
    assert "[demo] scope: already complete" in capsys.readouterr().out and results["transfer_scope"]["n"] == 3
    assert fakes.calls == ["transfer_scope"] and len(later) == 1

# -- DemoRun: the out dir records its run; others are refused or moved aside; one demo at a time -----------------
def _demo_cfg(out, seed=0, overwrite=False, demo="real", reuse="strict", **real):
    from demos.config import DemoRunConfig

    return OmegaConf.merge(OmegaConf.structured(DemoRunConfig),
                           {"out": str(out), "seed": seed, "overwrite": overwrite, "demo": demo, "reuse": reuse,
                            "real": real})


def _demo(cfg, fakes, checks=None):
    from demos.common import DemoRun

    demo = DemoRun(cfg, compose=fakes.compose, runners={"evaluate": fakes.evaluate}, checks=checks or {},
                   threads=None, stage_runner=StageRunner)
    return demo.run(fakes.stages(), lambda results: {"seed": cfg.seed, "base": results["eval_base"]},
                    lambda summary, out: (out / "report.md").write_text(f"seed {summary['seed']}\n"), lambda s: None)


def test_a_stage_setting_refused_by_its_recipes_check_stops_the_demo_before_any_stage(tmp_path, capsys):
    """Issue 42 #3: the demo checks every stage's composed config with the chain's validators (handed down as
    ``checks``) before the first stage runs: one line, exit 2, nothing run or written."""
    out, fakes = tmp_path / "out", Fakes()

    def check_evaluate(cfg):
        if cfg.model.path == "bad":
            raise ValueError("model.path must not be 'bad'")

    fakes.stages = lambda model="bad", real=fakes.stages: real(model)
    with pytest.raises(SystemExit) as e:
        _demo(_demo_cfg(out), fakes, checks={"evaluate": check_evaluate})
    assert e.value.code == 2 and fakes.calls == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "stages.eval_base" in err[0] and "model.path must not be 'bad'" in err[0]
    assert not (out / "demo.json").exists() and not (out / "stages").exists()


def test_after_a_refused_setting_the_corrected_command_continues_the_finished_run(tmp_path, capsys):
    """Issue 42 #3: a refused setting never reached a stage (nor ``demo.json``), so the corrected command into the
    same out dir is not refused as "other settings" and reuses every finished stage."""
    out, fakes = tmp_path / "out", Fakes()

    def check_evaluate(cfg):
        if cfg.model.path == "bad":
            raise ValueError("model.path must not be 'bad'")

    checks = {"evaluate": check_evaluate}
    assert "reused_stages" not in _demo(_demo_cfg(out), fakes, checks)
    good = fakes.stages
    fakes.stages = lambda model="bad": good(model)
    with pytest.raises(SystemExit):
        _demo(_demo_cfg(out), fakes, checks)
    fakes.stages = good
    assert _demo(_demo_cfg(out), fakes, checks)["reused_stages"] == ["eval_base"]
    assert fakes.calls == ["eval_base"]  # evaluated once, by the first run


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_another_seed_or_demo_is_refused_in_one_line_and_overwrite_moves_the_run_aside(tmp_path, capsys):
    """Another seed or demo kind into an out dir is refused (no stage of it could be reused). Since issue 42 case 3
    another setting of the same demo and seed is no longer refused: the next test."""
    out, fakes = tmp_path / "out", Fakes()
    summary = _demo(_demo_cfg(out), fakes)
    assert summary["seed"] == 0 and "reused_stages" not in summary
    assert json.loads((out / "demo.json").read_text())["seed"] == 0
    assert _demo(_demo_cfg(out), fakes)["reused_stages"] == ["eval_base"]  # the same command: continued
    before = _tree(out)
    for cfg, diff in ((_demo_cfg(out, seed=1), "seed: saved 0 != now 1"),
                      (_demo_cfg(out, demo="real_full"), "demo: saved 'real' != now 'real_full'")):
        capsys.readouterr()
        with pytest.raises(SystemExit) as e:
            _demo(cfg, fakes)
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and err[0].startswith("[demo] refused: ") and diff in err[0]
        assert "overwrite=true" in err[0]
        assert _tree(out) == before  # nothing moved, deleted or written (demo.log aside: opened after the claim)
    assert fakes.calls == ["eval_base"]

    summary = _demo(_demo_cfg(out, seed=1, overwrite=True), fakes)
    assert summary["seed"] == 1 and json.loads((out / "demo.json").read_text())["seed"] == 1
    old = tmp_path / "out.old-1"
    assert _tree(old) == {k: v for k, v in before.items() if k != ".lock"}  # all of it (the lock stays in out)
    assert (out / "report.md").read_text() == "seed 1\n"


def test_an_out_dir_of_an_earlier_version_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "stages" / "eval_base").mkdir(parents=True)
    (out / "summary.json").write_text('{"seed": 0}')
    with pytest.raises(SystemExit) as e:
        _demo(_demo_cfg(out, seed=1), Fakes())
    err = capsys.readouterr().err
    assert e.value.code == 2 and "no demo.json (a run of an earlier version" in err
    assert sorted(p.name for p in out.iterdir()) == [".lock", "stages", "summary.json"]


def test_the_toy_demos_keys_are_under_toy_and_a_run_recorded_before_they_moved_continues(tmp_path):
    """The toy demo's settings sit under ``toy`` as the real demo's under ``real``; a toy run whose ``demo.json``
    has them at the root (recorded before they moved) reads as the same run now, and one of other settings does
    not."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import ConfigCompositionException

    from demos.common import demo_settings, with_new_keys
    from demos.config import register
    from trainer.runtime.run_dir import config_differences

    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="demo", overrides=["demo=toy", "out=x", "toy.box2=false"])
        with pytest.raises(ConfigCompositionException):
            compose(config_name="demo", overrides=["demo=toy", "box2=false"])  # no longer a root key
    assert cfg.toy.box2 is False and cfg.toy.torch_threads == 1 and cfg.toy.stages.model == "tiny"
    now = demo_settings(cfg)
    assert list(now["settings"]) == ["toy"] and now["settings"]["toy"]["stages"]["dpo"]
    before = {**now, "settings": dict(now["settings"]["toy"])}  # the same settings at the root, as recorded then
    assert config_differences(before, now) and not config_differences(with_new_keys(before, "toy"), now)
    other = {**now, "settings": {**now["settings"]["toy"], "box2": True}}
    assert config_differences(with_new_keys(other, "toy"), now) == ["settings.toy.box2: saved True != now False"]


HOLD = """
import sys, time
from pathlib import Path
from trainer.runtime.run_dir import RunLock
RunLock(Path(sys.argv[1])).acquire()
print("held", flush=True)
time.sleep(120)
"""


def test_a_second_demo_into_a_busy_out_dir_is_refused_by_its_lock(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        fakes = Fakes()
        with pytest.raises(SystemExit) as e:
            _demo(_demo_cfg(out), fakes)
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1
        assert f"is in use by another run (host" in err[0] and f"pid {holder.pid}" in err[0] and "another out." in err[0]
        assert fakes.calls == [] and sorted(p.name for p in out.iterdir()) == [".lock"]
    finally:
        holder.kill()
        holder.wait()


# -- the toy demo itself through the scenarios (slow) ------------------------------------------------------
def _stage(name: str, *overrides: str) -> str:
    return f"toy.stages.{name}=[" + ",".join(f"'{o}'" for o in overrides) + "]"


# Short stages: a base that follows hints after 150 SFT steps (mining keeps about 50 quartets at seed 0), a DPO arm
# of 40 steps checkpointed every 5; the other arms and Box2 off.
SHORT = ["demo=toy", "toy.misleading_only=false", "toy.knowledge_aware=false", "toy.box2=false",
         _stage("base_sft", "algo=sft", "model.lora.enabled=false", "optim.lr=3.0e-3", "optim.batch_size=64",
                "optim.grad_accum=1", "trainer.max_steps=150", "trainer.save_every=0", "data.max_prompt_len=96",
                "data.max_completion_len=4", "trainer.progress=false"),
         _stage("dpo", "model.lora.r=16", "model.lora.alpha=32", "optim.lr=1.0e-3", "optim.batch_size=32",
                "optim.grad_accum=1", "trainer.max_steps=40", "trainer.save_every=5", "algo.beta=0.5",
                "data.max_prompt_len=96", "data.max_completion_len=4", "trainer.progress=false")]


def _reuse() -> list[str]:
    """``reuse=config`` in a checkout with uncommitted changes, else nothing (strict). A dirty tree matches no
    other run, itself included (trainer/runtime/provenance.py), so in a developer's edited checkout the rerun would
    train every stage again; these tests are about stopping and continuing, and CI's clean checkout runs them
    under the strict rule."""
    from trainer.runtime.provenance import DIRTY, git_commit

    return ["reuse=config"] if (git_commit(ROOT) or "").endswith(DIRTY) else []


def _start(out, *args, seed=0):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, str(ROOT / "recipes" / "demo.py"), *SHORT, *_reuse(), f"out={out}",
                             f"seed={seed}", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for(path: Path, proc, timeout=1800) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the demo ended before {path} appeared:\n{proc.stdout.read()[-3000:]}"
        assert time.time() < deadline, f"no {path} after {timeout} s"
        time.sleep(0.05)


def _finish(proc, timeout=1800) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:  # timed out (or the test failed meanwhile): end it
            proc.kill()
            proc.wait()
    return proc.returncode, out


@pytest.fixture(scope="module")
def finished_after_sigterm(tmp_path_factory):
    """The issue's first scenario: SIGTERM while the SCOPE arm trains (after its step-5 checkpoint), then the same
    command again. Returns (out dir, first output, second output, the files of the stages before the rerun)."""
    out = tmp_path_factory.mktemp("demo") / "out"
    proc = _start(out)
    _wait_for(out / "stages" / "scope" / "checkpoints" / "step_5" / "COMPLETE", proc)
    os.kill(proc.pid, signal.SIGTERM)
    code, first = _finish(proc)
    assert code == 0, first[-3000:]
    done = {s: (out / "stages" / s / f).read_bytes() for s, f in (("base_sft", "run_complete.json"),
                                                                  ("eval_base", "metrics.json"),
                                                                  ("mine", "pairs.jsonl"))}
    code, second = _finish(_start(out))
    assert code == 0, second[-3000:]
    return out, first, second, done


@pytest.mark.slow
def test_sigterm_while_an_arm_trains_then_the_same_command_resumes_it(finished_after_sigterm):
    out, first, second, done = finished_after_sigterm
    last = first.strip().splitlines()[-1]
    assert last.startswith("[demo] stage scope stopped early (its checkpoint is saved); run the same command again")
    assert "Traceback" not in first
    # the rerun kept and reused every finished stage, resumed the arm, and wrote the summary of this seed
    for stage in ("base_sft", "eval_base", "eval_base_unseen", "mine"):
        assert f"[demo] {stage}: already complete" in second, stage
    assert "[demo] scope: resuming" in second and "[selectrust] resumed from" in second
    assert {s: (out / "stages" / s / f).read_bytes() for s, f in (("base_sft", "run_complete.json"),
                                                                  ("eval_base", "metrics.json"),
                                                                  ("mine", "pairs.jsonl"))} == done
    summary = json.loads((out / "summary.json").read_text())
    assert summary["seed"] == 0 and set(summary["reused_stages"]) >= {"base_sft", "eval_base", "mine"}
    assert summary["scope"]["base"] == json.loads((out / "stages" / "eval_base" / "metrics.json").read_text())
    assert json.loads((out / "stages" / "scope" / "run_complete.json").read_text())["step"] == 40


@pytest.mark.slow
def test_another_seed_into_a_finished_out_dir_is_refused_and_overwrite_moves_it_aside(finished_after_sigterm):
    out = finished_after_sigterm[0]
    before = _tree(out)
    code, said = _finish(_start(out, seed=1), timeout=600)
    assert code == 2 and said.strip().splitlines()[-1].startswith("[demo] refused: ") and "seed: saved 0 != now 1" in said
    assert _tree(out) == before  # every seed-0 stage kept, nothing of seed 1 written

    proc = _start(out, "overwrite=true", seed=1)
    old = out.with_name("out.old-1")
    _wait_for(old, proc)  # the seed-0 run is moved aside before any stage of seed 1 runs
    _wait_for(out / "stages" / "base_sft", proc)
    os.kill(proc.pid, signal.SIGTERM)
    code, said = _finish(proc)
    assert code == 0 and "Traceback" not in said and said.strip().splitlines()[-1].startswith("[demo] stage base_sft")
    assert _tree(old) == {k: v for k, v in before.items() if k != ".lock"}  # all of it (the lock stays in out)
    assert json.loads((out / "demo.json").read_text())["seed"] == 1 and not (out / "summary.json").exists()


@pytest.mark.slow
def test_a_second_demo_into_the_same_out_dir_is_refused_and_the_first_is_unharmed(tmp_path):
    out = tmp_path / "out"
    first = _start(out)
    try:
        _wait_for(out / "stages" / "base_sft", first)  # the first demo holds the out dir
        code, said = _finish(_start(out, seed=1), timeout=600)
        assert code == 2, said[-3000:]
        # issue 59: the out dir a run holds is refused before Hydra writes into it, in the error contract's one line
        last = said.strip().splitlines()[-1]
        assert last.startswith("error: ") and "in use by another run" in last and f"pid {first.pid}" in last, said
        assert json.loads((out / "demo.json").read_text())["seed"] == 0 and first.poll() is None
        os.kill(first.pid, signal.SIGTERM)
    finally:
        code, said = _finish(first)
    assert code == 0 and said.strip().splitlines()[-1].startswith("[demo] stage ")


def test_the_pre_check_tolerates_only_a_missing_path_an_earlier_stage_will_write(tmp_path):
    """The demos check every stage's config with its recipe's validator before anything runs (issue 42 #3). A
    stage whose model is an earlier step stage's output (the real demo's SCOPE on ``stages/convert``) names a path
    that does not exist yet: a missing path inside the run directory is left to the stage's own start; one
    outside it is refused before any stage runs."""
    from omegaconf import OmegaConf

    from selectrust.core.errors import ConfigError
    from recipes.stages import StageRunner
    from trainer.runtime.stage import Stage

    root = tmp_path / "run"
    runner = StageRunner(root, seed=0, compose=lambda recipe, overrides: OmegaConf.create({"out_dir": None}),
                         runners={"dpo": lambda cfg: None})

    def missing(path):
        def validate(cfg):
            raise FileNotFoundError(f"model.path: model directory {str(path)!r} does not exist")
        return validate

    stages = [Stage("convert", call=lambda out: None), Stage("scope", recipe="dpo")]
    runner.check(stages, {"dpo": missing(root.resolve() / "stages" / "convert")})
    with pytest.raises(ConfigError, match="stages.scope .*does not exist"):
        runner.check(stages, {"dpo": missing(tmp_path / "elsewhere")})
