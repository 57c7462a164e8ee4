"""A second held-out relation on finished real-demo runs (``python -m demos.real.second_relation``, issue 61): its
stages are the demo's own evaluations on a facts set that holds ``currency`` out, it refuses a run that trained on
the relation, and it pools the runs' item scores into the change from the base and the three relation targets.

The evaluations here are fakes (no model loads); the facts builder is the real one where the never-trained check is
the point, a fake elsewhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_demo_out_dir import _clean_checkout  # noqa: F401 (the autouse fixture: a clean commit)
from test_real_demo import _compose

CONDS = ("clean", "misleading", "correct", "irrelevant")


def _write_run(root: Path, seed: int, extra: tuple[str, ...] = (), demo: str = "real_full",
               arms=("scope", "knowledge_aware"), adapters=("scope",)) -> Path:
    """A finished run's files: ``demo.json`` (the composed settings; the model a local path, so no conversion),
    ``summary.json`` (its arms), a training file and the adapters named."""
    from demos.common import demo_settings
    from selectrust.core.io import write_jsonl_atomic

    run = root / f"seed{seed}"
    cfg = _compose([f"out={run}", f"demo={demo}", f"seed={seed}", f"real.model={root / 'model'}", *extra])
    run.mkdir(parents=True)
    (run / "demo.json").write_text(json.dumps(demo_settings(cfg)))
    (run / "summary.json").write_text(json.dumps({"demo": demo, "size": "full", "split": "dev", "seed": seed,
                                                  "real": {a: {} for a in ("base", *arms)}}))
    write_jsonl_atomic(run / "stages" / "facts" / "facts_train.jsonl", _rows({"t0": "Paris", "t1": "Rome"}, "capital"))
    for a in adapters:
        (run / "stages" / a / "final").mkdir(parents=True)
        (run / "stages" / a / "final" / "adapter_config.json").write_text("{}")
    return run


def _rows(items: dict[str, str], relation: str = "currency") -> list[dict]:
    rows = []
    for i, gold in items.items():
        for c, ctx in (("clean", None), ("misleading", "It is the Xor."), ("correct", f"It is the {gold}."),
                       ("irrelevant", "The currency of Peru is the Sol.")):
            rows.append({"item_id": i, "condition": c, "subject": f"Land {i}", "gold": gold, "wrong_value": "Xor",
                         "prompt": (ctx + "\n\n" if ctx else "") + f"What is the currency of Land {i}?",
                         "relation": relation, "answer_type": "short_text"})
    return rows


CURRENCY = {f"c{n}": f"Coin{n}" for n in range(6)}


def _fake_build(calls: list):
    """``build_dir`` as a fake: the run's training file (so the never-trained check finds it identical) and both
    parts of the currency relation."""
    from selectrust.core.io import write_jsonl_atomic

    def build_dir(out, *, seed, size, fixed_split, invented_items, transfer_relation, transfer_dev_items):
        calls.append((seed, size, fixed_split, invented_items, transfer_relation, transfer_dev_items))
        out = Path(out)
        write_jsonl_atomic(out / "facts_train.jsonl", _rows({"t0": "Paris", "t1": "Rome"}, "capital"))
        write_jsonl_atomic(out / "facts_transfer_dev.jsonl", _rows(dict(list(CURRENCY.items())[:4])))
        write_jsonl_atomic(out / "facts_transfer.jsonl", _rows(dict(list(CURRENCY.items())[4:])))
        return {}

    return build_dir


class FakeEvaluate:
    """The evaluate recipe as a fake: item scores from a fixed rule per model (the base knows c0 and c1; the adapter
    ``scope`` follows every context), the base's knowledge estimate, metrics.json."""

    def __init__(self):
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, cfg) -> dict:
        from selectrust.core.io import read_records, write_jsonl_atomic

        out = Path(cfg.out_dir)
        arm = "base" if cfg.adapter_path is None else Path(cfg.adapter_path).parent.name
        self.calls.append((out.name, {"eval.path": cfg.eval.path, "adapter_path": cfg.adapter_path, "seed": cfg.seed,
                                      "knowledge.enabled": cfg.knowledge.enabled,
                                      "eval.knowledge_path": cfg.eval.knowledge_path,
                                      "model": cfg.model.path, "max_rows": cfg.eval.max_rows}))
        rows = [r for _, r in read_records(cfg.eval.path)]
        known = {"c0", "c1"}
        label = {r["item_id"]: "known" if r["item_id"] in known else "unknown" for r in rows}
        right = {"base": lambda r: r["condition"] == "correct" or (r["item_id"] in known
                                                                     and r["condition"] != "misleading"),
                 "scope": lambda r: r["condition"] == "correct"}[arm]
        scores = [{**r, "knowledge": label[r["item_id"]], "correct": right(r)} for r in rows]
        out.mkdir(parents=True, exist_ok=True)
        write_jsonl_atomic(out / "item_scores.jsonl", scores)
        if cfg.knowledge.enabled:
            write_jsonl_atomic(out / "knowledge.jsonl", [{"item_id": i, "knowledge": k} for i, k in label.items()])
        metrics = {"n_items": len(label), "accuracy": {c: 0.5 for c in CONDS}, "sc2w": 0.5,
                   "unknown_correct_accuracy": 1.0}
        (out / "metrics.json").write_text(json.dumps(metrics))
        return metrics


def test_the_plan_is_the_demo_s_own_evaluations_on_the_relation_s_items(tmp_path):
    from demos.real.pipeline import stages
    from demos.real.second_relation import plan, run_config

    run = _write_run(tmp_path, 100, ("real.split=dev",))
    cfg = run_config(run)
    assert (cfg.seed, cfg.demo, cfg.real.split, str(cfg.out)) == (100, "real_full", "dev", str(run.resolve()))
    dev = {s.name: s for s in plan(cfg, "currency", "dev", ["scope", "knowledge_aware"])}
    assert list(dev) == ["convert", "second_currency_facts", "dev_second_currency_base", "scope",
                         "dev_second_currency_scope", "knowledge_aware", "dev_second_currency_knowledge_aware"]
    demo = {s.name: s for s in stages(cfg)}  # the demo's own dev evaluations of the held-out relation
    for arm in ("base", "scope", "knowledge_aware"):
        mine, theirs = dev[f"dev_second_currency_{arm}"], demo[f"dev_transfer_{arm}"]
        assert (mine.recipe, mine.overrides, mine.seed) == (theirs.recipe, theirs.overrides, theirs.seed)
        assert mine.inputs["eval.path"] == "second_currency_facts/facts_transfer_dev.jsonl"
        assert {k: v for k, v in mine.inputs.items() if k != "eval.path"} == {
            k: v.replace("dev_transfer", "dev_second_currency") for k, v in theirs.inputs.items() if k != "eval.path"}
    base = dev["dev_second_currency_base"]
    assert base.overrides == ["model=smollm2_135m", "eval=facts", *cfg.real.stages.evaluate, "eval.max_rows=null",
                              *cfg.real.stages.knowledge, "knowledge.enabled=true"]
    assert base.seed == 0 and dev["dev_second_currency_scope"].seed is None  # the base seedless, as the demo's
    assert dev["dev_second_currency_scope"].inputs == {
        "model.path": "convert", "eval.path": "second_currency_facts/facts_transfer_dev.jsonl", "adapter_path": "scope",
        "eval.knowledge_path": "dev_second_currency_base/knowledge.jsonl"}
    test = {s.name: s for s in plan(cfg, "currency", "test", ["scope"])}
    assert list(test) == ["convert", "second_currency_facts", "second_currency_base", "scope", "second_currency_scope"]
    assert test["second_currency_scope"].inputs["eval.path"] == "second_currency_facts/facts_transfer.jsonl"
    assert test["second_currency_scope"].inputs["eval.knowledge_path"] == "second_currency_base/knowledge.jsonl"


def test_the_command_runs_the_stages_once_reuses_them_and_pools_the_runs(tmp_path, monkeypatch, capsys):
    """Two seeds' runs: the facts built with each run's settings and currency held out, the base with its estimate
    and each arm that has an adapter evaluated, the records kept; the same command again reuses every stage."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import eval_hooks.builders.facts as facts
    from demos.real.second_relation import Tools, main
    from recipe_utils import ROOT
    from recipes.stages import StageRunner
    from trainer.config import compose

    built = []
    monkeypatch.setattr(facts, "build_dir", _fake_build(built))
    runs = [_write_run(tmp_path, s, ("real.split=dev",)) for s in (100, 101)]
    fake = FakeEvaluate()
    tools = Tools(compose, {"evaluate": fake}, StageRunner)
    argv = [*map(str, runs), "--relation", "currency", "--split", "dev", "--out", str(tmp_path / "out"),
            "--n-boot", "200"]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        assert main(argv, tools=tools) == 0
        first = list(fake.calls)
        assert main(argv, tools=tools) == 0  # the same command again: every evaluation reused
    assert fake.calls == first
    assert [c[0] for c in first] == ["dev_second_currency_base", "dev_second_currency_scope"] * 2
    assert built[0] == (100, "full", 1, 0, "currency", 100) and len(built) == 4  # a step: built every time
    calls = {(Path(c[1]["eval.path"]).parents[2].name, c[0]): c[1] for c in first}
    base, scope = calls[("seed101", "dev_second_currency_base")], calls[("seed101", "dev_second_currency_scope")]
    assert base["eval.path"] == str(runs[1] / "stages" / "second_currency_facts" / "facts_transfer_dev.jsonl")
    assert (base["knowledge.enabled"], base["adapter_path"], base["seed"], base["max_rows"]) == (True, None, 0, None)
    assert base["model"] == str(tmp_path / "model")
    assert (scope["knowledge.enabled"], scope["seed"]) == (False, 101)
    assert scope["adapter_path"] == str(runs[1] / "stages" / "scope" / "final")
    assert scope["eval.knowledge_path"] == str(runs[1] / "stages" / "dev_second_currency_base" / "knowledge.jsonl")
    record = json.loads((runs[0] / "stages" / "dev_second_currency_scope" / "stage_complete.json").read_text())
    assert record["provenance"]["git_commit"] and (runs[0] / "second_relation.log").is_file()
    out = json.loads((tmp_path / "out" / "second_relation.json").read_text())
    assert out["seeds"] == [100, 101] and set(out["pooled"]) == {"base", "scope"}
    assert out["runs"][0]["arms_without_adapter"] == ["knowledge_aware"]  # no adapter: not evaluated
    assert out["runs"][0]["never_trained"]["rule"] == "byte-identical"
    # the fake base knows c0, c1 (resisting nothing); scope follows every context: unknown-correct unchanged (100%)
    scope = out["pooled"]["scope"]
    assert scope["minus_base"]["unknown_correct_accuracy"]["value"] == 0.0
    assert scope["minus_base"]["clean"]["value"] == -0.5 and scope["paired"]["paired_n"] == 4
    assert "Second held-out relation: `currency`" in (tmp_path / "out" / "second_relation.md").read_text()


def _scores(path: Path, clean, misleading, correct, irrelevant, unknown) -> None:
    from selectrust.core.io import write_jsonl_atomic

    n = len(clean)
    write_jsonl_atomic(path, [{"item_id": f"i{i}", "condition": c, "knowledge": "unknown" if unknown[i] else "known",
                               "correct": bool(v[i])} for i in range(n)
                              for c, v in zip(CONDS, (clean, misleading, correct, irrelevant))])


def test_the_pooled_table_on_hand_made_item_scores(tmp_path):
    """20 items per seed, the same on both seeds (the fixed split): the base knows i0-i9 and resists the misleading
    context on two of them (SC2W 8/10); ``scope`` resists on eight (paired 2/10: 0.25x), but uses the correct context
    on only half the unknown items (correct -25 points, unknown-correct -50); ``knowledge_aware`` answers as the
    base (a ratio of 1.0, no change)."""
    from demos.real.second_relation import pooled, table

    know = [i < 10 for i in range(20)]
    unknown = [not k for k in know]
    base = (know, [i < 2 for i in range(20)], [True] * 20, know)
    arms = {"base": base, "knowledge_aware": base,
            "scope": (know, [i < 8 for i in range(20)], [i < 15 for i in range(20)], know)}
    entries = []
    for seed in (0, 1):
        for arm, v in arms.items():
            _scores(tmp_path / f"s{seed}" / "stages" / f"second_currency_{arm}" / "item_scores.jsonl", *v, unknown)
        entries.append({"dir": str(tmp_path / f"s{seed}"), "seed": seed, "arms": ["scope", "knowledge_aware"]})
    result = pooled(entries, "currency", "test", 100, n_boot=300)
    scope = result["pooled"]["scope"]
    assert scope["minus_base"]["correct"]["value"] == pytest.approx(-0.25)
    assert scope["minus_base"]["unknown_correct_accuracy"]["value"] == pytest.approx(-0.5)
    assert scope["paired"]["paired_ratio"]["value"] == pytest.approx(0.25)
    lo, hi = scope["minus_base"]["correct"]["ci"]
    assert lo <= -0.25 <= hi < 0
    holds = {a: [t["holds"] for t in ts] for a, ts in result["targets"].items()}
    assert holds == {"scope": ["bound", "fails", "fails"], "knowledge_aware": ["fails", "bound", "bound"]}
    names = [t["name"] for t in result["targets"]["scope"]]
    assert names == ["second held-out relation (currency): paired SC2W <= 0.7 x base",
                     "second held-out relation (currency): correct accuracy >= base - 5 points",
                     "second held-out relation (currency): unknown-correct >= base - 5 points"]
    md = table(result)
    assert "| SCOPE | +0.0 pp [+0.0 pp, +0.0 pp] | -25.0 pp [" in md and "| -50.0 pp [" in md and "| 0.25× [" in md
    assert "| knowledge-aware | +0.0 pp [+0.0 pp, +0.0 pp] |" in md
    assert "| SCOPE | 0.25× (bound " in md and "): **bound** | -25.0 pp (bound " in md
    assert "40 items (20 per seed), 20 labelled unknown" in md


def test_never_trained_refuses_a_run_that_trained_on_the_relation(tmp_path):
    from demos.real.second_relation import never_trained
    from selectrust.core.errors import DataError
    from selectrust.core.io import write_jsonl_atomic

    built = tmp_path / "built"
    write_jsonl_atomic(built / "facts_train.jsonl", _rows({"t0": "Paris"}, "capital"))
    write_jsonl_atomic(built / "facts_transfer_dev.jsonl", _rows({"c0": "Coin0"}))
    write_jsonl_atomic(built / "facts_transfer.jsonl", _rows({"c1": "Coin1"}))
    run = tmp_path / "run_train.jsonl"
    write_jsonl_atomic(run, _rows({"t0": "Paris"}, "capital"))
    assert never_trained(built, run, "currency")["rule"] == "byte-identical"
    write_jsonl_atomic(run, _rows({"t0": "Paris", "inv": "Zorbia"}, "invented_capital"))  # differs, harmless
    assert never_trained(built, run, "currency")["rule"] == "by rows"
    write_jsonl_atomic(run, _rows({"t0": "Paris"}, "capital") + _rows({"x": "Coin9"}))  # a currency item trained on
    with pytest.raises(DataError, match="1 training items of the relation"):
        never_trained(built, run, "currency")
    stating = [{"item_id": "t9", "condition": "clean", "relation": "capital",
                "prompt": "The currency of Land c1 is the Coin1. What is the capital of Land c1?"}]
    write_jsonl_atomic(run, _rows({"t0": "Paris"}, "capital") + stating)  # a prompt stating a held-out fact
    with pytest.raises(DataError, match=r"1 of its facts stated by a training prompt \['c1'\]"):
        never_trained(built, run, "currency")
    with pytest.raises(DataError, match="missing"):
        never_trained(built, tmp_path / "nowhere.jsonl", "currency")


def test_the_real_build_holding_currency_out_trains_on_the_run_s_file_byte_for_byte(tmp_path):
    """The facts builder itself: the demo's facts stage (small set, fixed split, continent held out) and this
    command's build (currency held out) write the same training file, so the run never saw a currency fact (the
    builder's leak check); the relation has dev and test items, no subject in both."""
    from demos.real.pipeline import build_facts
    from demos.real.second_relation import build_step, run_config
    from selectrust.core.io import read_records

    run = _write_run(tmp_path, 0, ("real.split=dev", "real.facts_size=small"), demo="real")
    build_facts(0, "small", True, 0)(run / "stages" / "facts")
    out = build_step(run_config(run), "currency", 100)(run / "stages" / "second_currency_facts")
    assert json.loads((out / "never_trained.json").read_text())["rule"] == "byte-identical"
    stats = json.loads((out / "build_stats.json").read_text())
    assert stats["settings"]["transfer_relation"] == "currency" and stats["transfer_dev_items"] > 40
    subjects = {name: {r["subject"] for _, r in read_records(out / name) if r["condition"] == "clean"}
                for name in ("facts_transfer_dev.jsonl", "facts_transfer.jsonl")}
    assert all(subjects.values()) and not subjects["facts_transfer_dev.jsonl"] & subjects["facts_transfer.jsonl"]
    assert {r["relation"] for _, r in read_records(out / "facts_transfer_dev.jsonl")} == {"currency"}
