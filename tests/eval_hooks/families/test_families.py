"""The family registry: a minimal fifth family, defined here, added through the registry (in code and as an
installed package's entry point) and taken through expand -> score -> metrics -> report -> run by the same
public functions the CLI and the trainers use; its own setting (``eval.echo.hinted``) is composed into the
``eval`` config group and set on the command line. This is the worked example of docs/architecture.md, "How
to add an evaluation family"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import eval_hooks.families as families
import selectrust.core.plugins as plugins
from eval_hooks import FAMILIES, DataError, load_rows, run_matched_eval, score_responses
from selectrust.generation.backends.base import GenerationBackend, GenerationResult, Sample
from eval_hooks.families import Family, get_family, register_family, unregister_family
from eval_hooks.families.base import check_gold, items_once, req_str
from eval_hooks import compute_metrics, headline
from eval_hooks.metrics.common import check_rows, rate
from eval_hooks.report import compare_table, write_report
from eval_hooks.scoring.report_kit import md_table, pct
from selectrust.core.settings import setting

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class EchoSettings:
    """The echo family's own settings: the section ``eval.echo`` of every recipe's config."""

    hinted: bool = setting(True, "Also ask each question with its hint (condition hinted); false = plain rows only.")


class EchoFamily(Family):
    """Yes/no questions asked plainly and with a hint: conditions ``plain`` and ``hinted``."""

    name = "echo"
    answer_types = ("boolean",)
    condition_accepted = "plain | hinted"
    settings = EchoSettings  # composed into the eval group as eval.echo.hinted

    def eval_rows(self, path, settings=None):
        rows = self.load(path)
        return rows if self.own_settings(settings).hinted else [r for r in rows if r["condition"] == "plain"]

    def is_condition(self, c):
        return c in ("plain", "hinted")

    def expand_records(self, records, path):
        rows = []
        for ctx, rec, item_id in items_once(records, path):
            q = req_str(rec, "question", ctx)
            gold = check_gold(rec.get("gold"), "boolean", ctx)
            for cond, prompt in (("plain", q), ("hinted", f"{q} (Hint: {rec.get('hint', 'none')})")):
                rows.append({"row_id": f"{item_id}/{cond}", "item_id": item_id, "condition": cond,
                             "prompt": f'{prompt}\nEnd with "ANSWER: yes" or "ANSWER: no".', "gold": gold,
                             "answer_type": "boolean"})
        return rows

    def metrics(self, item_scores, *, n_boot=1000, seed=0):
        import numpy as np

        check_rows(item_scores, self.name)
        acc = {c: rate(np.array([r["correct"] for r in item_scores if r["condition"] == c], dtype=bool))
               for c in ("plain", "hinted")}
        return {"accuracy": acc, "n_items": len({r["item_id"] for r in item_scores})}

    def headline(self, metrics):
        return {f"accuracy.{c}": v for c, v in metrics["accuracy"].items()}

    def report_section(self, metrics, item_scores, out_dir, title):
        return [md_table(["condition", "accuracy"], [[c, pct(v)] for c, v in metrics["accuracy"].items()])], []


ITEMS = [{"item_id": "e1", "question": "Is 7 prime?", "gold": "yes", "hint": "it is not"},
         {"item_id": "e2", "question": "Is 9 prime?", "gold": "no"}]


@pytest.fixture
def echo():
    family = register_family(EchoFamily())
    yield family
    unregister_family("echo")


def test_a_fifth_family_runs_expand_score_metrics_report(echo, tmp_path):
    items = tmp_path / "echo.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in ITEMS))
    assert "echo" in FAMILIES and list(FAMILIES)[:4] == ["mist", "box2", "taste", "med"]
    rows = load_rows("echo", items)  # expand (validated)
    assert [r["row_id"] for r in rows] == ["e1/plain", "e1/hinted", "e2/plain", "e2/hinted"]
    # the expanded rows read back are validated as rows (the `score` verb reads a rows file)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert load_rows("echo", tmp_path / "rows.jsonl") == rows
    # e1 right when plain, wrong when hinted; e2 right in both
    responses = {"e1/plain": "ANSWER: yes", "e1/hinted": "ANSWER: no", "e2/plain": "ANSWER: no", "e2/hinted": "no"}
    m = score_responses("echo", rows, responses, tmp_path / "out", step=2)
    assert m["accuracy"] == {"plain": 1.0, "hinted": 0.5} and m["n_rows"] == 4 and m["step"] == 2
    assert json.loads((tmp_path / "out" / "metrics.json").read_text()) == m
    scores = [json.loads(x) for x in (tmp_path / "out" / "item_scores.jsonl").read_text().splitlines()]
    assert compute_metrics("echo", scores)["accuracy"] == m["accuracy"]
    assert headline("echo", m) == {"accuracy.plain": 1.0, "accuracy.hinted": 0.5}
    report = (tmp_path / "out" / "report.md").read_text()
    assert report.startswith("# echo evaluation") and "| hinted | 50.0% |" in report
    assert write_report("echo", m, scores, tmp_path / "r", title="T").read_text().startswith("# T")
    assert "| `accuracy.hinted` | 50.0% | 50.0% | +0.0 pp |" in compare_table({"a": m, "b": m}, "echo")


def test_a_fifth_family_runs_through_the_generic_run(echo, tmp_path):
    class Yes(GenerationBackend):
        name = "yes"

        def generate(self, requests, *, progress=False, desc=""):
            assert desc == "eval echo"
            return [GenerationResult(r, [Sample("ANSWER: yes", [], [], "stop")]) for r in requests]

        def score_labels(self, prompts, labels):  # pragma: no cover - not used by the generic run
            raise NotImplementedError

    rows = echo.expand_records(list(enumerate(ITEMS, start=1)), "items")
    m = run_matched_eval(Yes(), rows, "echo", tmp_path / "o", progress=False)
    assert m["accuracy"] == {"plain": 0.5, "hinted": 0.5} and m["eval_settings"]["backend"] == "yes"


def test_bad_items_of_a_fifth_family_name_file_line_field(echo, tmp_path):
    items = tmp_path / "echo.jsonl"
    items.write_text(json.dumps(ITEMS[0]) + "\n" + json.dumps({"item_id": "e2", "question": "?", "gold": "maybe"}) + "\n")
    with pytest.raises(DataError, match=r"echo.jsonl, line 2, field 'gold'"):
        load_rows("echo", items)


def test_a_family_from_an_installed_packages_entry_point(monkeypatch, tmp_path):
    """A separate package declares ``[project.entry-points."selectrust.families"] echo = "mod:EchoFamily"``:
    the group is read when the names are needed and the module imported only when the family is used."""
    ep = EntryPoint("echo", f"{__name__}:EchoFamily", families.ENTRY_POINT_GROUP)
    monkeypatch.setattr(FAMILIES, "installed", None)
    monkeypatch.setattr(FAMILIES, "loaded", {})
    monkeypatch.setattr(plugins, "entry_points", lambda group: [ep] if group == families.ENTRY_POINT_GROUP else [])
    assert list(FAMILIES) == ["mist", "box2", "taste", "med", "nq_swap", "echo"]
    fam = get_family("echo")
    assert isinstance(fam, EchoFamily) and get_family("echo") is fam
    assert len(load_rows("echo", _write(tmp_path, ITEMS))) == 4


def test_a_familys_settings_are_composed_into_the_eval_group(echo, tmp_path):
    """Registered before the schema is built, the family's settings are the section ``eval.echo``: typed, with
    their default and help text, settable from a composed config, read back by the family."""
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError, ValidationError

    from trainer.config import eval_config_schema, help_text

    schema = eval_config_schema()  # the schema the recipes get with echo installed (EvalConfig: at first import)
    cfg = OmegaConf.structured(schema)
    assert cfg.echo.hinted is True and cfg.med.judge == "keyword" and cfg.max_prompt_tokens == 65536  # the others too
    assert ("echo.hinted", EchoSettings.__dataclass_fields__["hinted"].metadata["help"], True, ()) in help_text(schema)
    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(["echo.hinted=false"]))
    assert echo.settings_from(cfg) == EchoSettings(hinted=False)
    assert [r["condition"] for r in echo.eval_rows(_write(tmp_path, ITEMS), echo.settings_from(cfg))] == ["plain"] * 2
    with pytest.raises(ValidationError, match="hinted"):
        OmegaConf.merge(cfg, OmegaConf.from_dotlist(["echo.hinted=perhaps"]))
    with pytest.raises(ConfigKeyError, match="hint"):
        OmegaConf.merge(cfg, OmegaConf.from_dotlist(["echo.hint=true"]))


def test_a_settings_key_used_twice_is_refused():
    """A family whose settings would take a key of the eval group, or of another family, is an error naming both."""
    flat = dataclass(type("FlatSettings", (), {"__annotations__": {"max_prompt_tokens": "int"},
                                               "max_prompt_tokens": setting(1, "Taste's key, declared again.")}))
    clash = type("Clash", (EchoFamily,), {"name": "clash", "settings": flat, "flat_settings": True})()
    named_path = type("PathFamily", (EchoFamily,), {"name": "path"})()  # its section would be eval.path
    for family, match in ((clash, "eval.max_prompt_tokens: family 'clash' declares a setting that family 'taste' "
                                  "already has"),
                          (named_path, "eval.path: family 'path' declares a setting that the eval group itself "
                                       "already has")):
        register_family(family)
        try:
            with pytest.raises(ValueError, match=match):
                families.settings_fields(["enabled", "path"])
        finally:
            unregister_family(family.name)


def test_an_installed_packages_family_has_its_settings_on_the_command_line(tmp_path, tiny_model_dir):
    """An installed package's entry point (a distribution's metadata on the path, as ``pip install`` leaves it)
    adds the family *and* its settings: ``--help`` lists ``eval.echo.hinted`` with its help text, and
    ``recipes/evaluate.py eval.family=echo eval.echo.hinted=false`` evaluates the plain rows only."""
    site = tmp_path / "site"
    dist = site / "echo_family-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-family\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{families.ENTRY_POINT_GROUP}]\necho = tests.eval_hooks.families.test_families:EchoFamily\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ["PYTHONPATH"]])}
    items, out = _write(tmp_path, ITEMS), tmp_path / "out"
    args = ["eval.family=echo", f"eval.path={items}", "eval.echo.hinted=false"]
    shown = subprocess.run([sys.executable, "recipes/evaluate.py", "--help", *args], capture_output=True, text=True,
                           cwd=ROOT, env=env, timeout=300)
    assert shown.returncode == 0, shown.stderr
    assert "  eval.echo.hinted = False  [default True]\n      Also ask each question with its hint" in shown.stdout
    assert "  eval.family = echo  [default mist; mist | box2 | taste | med | nq_swap | echo]" in shown.stdout
    ran = subprocess.run([sys.executable, "recipes/evaluate.py", "model.path=tiny", *args, "eval.max_new_tokens=2",
                          f"out_dir={out}"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["family"] == "echo" and metrics["n_rows"] == 2 and set(metrics["accuracy"]) == {"plain", "hinted"}
    assert {json.loads(x)["condition"] for x in (out / "item_scores.jsonl").read_text().splitlines()} == {"plain"}


def test_unknown_and_clashing_families_are_refused():
    with pytest.raises(DataError, match=r"field 'family': unknown family 'mmlu' \(accepted: mist \| box2 \| taste \| med"):
        get_family("mmlu")
    with pytest.raises(ValueError, match="'mist' is already registered"):
        register_family(type("Other", (EchoFamily,), {"name": "mist"})())
    with pytest.raises(TypeError):
        register_family("echo")


def _write(tmp_path, records):
    p = tmp_path / "items.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in records))
    return p
