"""A second held-out relation, evaluated on finished real-demo runs (issue 61): does an arm use the context, and resist
a misleading one, on a relation it never trained on whose answers are not place names?

    python -m demos.real.second_relation RUN_DIR [RUN_DIR ...] --relation currency --split dev --out DIR

The demo's own held-out relation (``continent``) answers with place names, like every trained relation. The facts
builder has a relation whose answers are not places, ``currency`` (country -> its currency as GeoNames names it,
"What is the currency of Japan?" -> Yen; :mod:`eval_hooks.builders.facts.relations`), that no run trains on; the
base answers about a quarter of it clean (docs/data.md), so most of its items are facts the base does not know: what
issue 61's unknown-correct target on a relation never trained on asks about. Nothing of the demo's pipeline changes:
this reads a finished run and adds stages to its ``stages/``, each reused when the same command runs again.

Per run (its ``demo.json`` settings; the stages run by the stage runner, as the demo's, under the run dir's lock,
logged to ``second_relation.log``):

1. ``second_<relation>_facts``: the facts set built with the run's settings (``real.facts_size``,
   ``real.fixed_split``, ``real.invented_items``, the run's seed) but ``--transfer-relation <relation>`` and
   ``--transfer-dev-items`` (``--transfer-dev-items``, default :data:`DEV_ITEMS`: the builder's 40 would leave dev too
   few items; on the full set's fixed split currency has 185 items: 100 dev, 85 test; keep it fixed once chosen, it
   is the dev/test split of the relation). Its ``facts_transfer_dev.jsonl`` is the ``dev`` split's items,
   ``facts_transfer.jsonl`` the ``test`` split's. **Never trained on** (:func:`never_trained`, written to the
   stage's ``never_trained.json``): the training file this build makes is byte for byte the run's
   ``stages/facts/facts_train.jsonl`` (the builder's leak rule then covers the run: no training prompt states a fact
   of the relation), or, where it is not (a run with invented items: their names avoid the other files' words), no
   training row of the run has the relation and no training prompt of the run names one of its items' subject with
   its gold or an alias; anything else is refused.
2. ``<prefix>_base`` (``second_<relation>`` for test, ``dev_second_<relation>`` for dev): the base with its knowledge
   estimate, and ``<prefix>_<arm>`` for every trained arm of the run's ``summary.json`` whose adapter is in
   ``stages/<arm>/final/``, split by the base's labels: the stages of the demo's own evaluations
   (:func:`demos.real.pipeline.evaluations`: ``model=smollm2_135m``, ``eval=facts``, ``real.stages.evaluate``,
   ``eval.max_rows=null``; the base with ``real.stages.knowledge`` and ``knowledge.enabled=true`` and the seed of the
   seed-independent stages, :func:`demos.real.pipeline.base_seed`), each writing ``metrics.json`` and
   ``item_scores.jsonl``.

Pooled over the runs (their seeds; runs of the same settings, :func:`demos.real.seeds.check_same_settings`), from the
item scores: each arm's change from the base in every condition and in unknown-correct with the item bootstrap paired
by item and stratified by seed, the paired SC2W ratio (:func:`demos.real.pooled.pool`), and issue 61's three
held-out-relation targets (paired SC2W <= 0.7x the base's; correct, unknown-correct >= the base's - 5 points) judged
by the decision rule (:func:`demos.real.decision.decide_sets`: the one-sided 95% bound of the two-level bootstrap,
the point beside). ``DIR/second_relation.json`` and ``DIR/second_relation.md``; the table is printed.

Why a second command: the demos never import the recipes (docs/architecture.md), and the stage runner is theirs, so
this module hands its arguments to the demo's entry point (``python -m recipes.demo second-relation ...``), which
hands the stage runner and the evaluate recipe back to :func:`main`, as it does for the demo itself.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from omegaconf import OmegaConf

from eval_hooks.builders.facts import RELATIONS
from eval_hooks.parsers import normalize_short_text
from selectrust.conditions import CLEAN
from selectrust.core.errors import DataError
from selectrust.core.io import read_records, write_json_atomic, write_text_atomic
from trainer.runtime.provenance import run_provenance, stage_provenance
from trainer.runtime.stage import Stage

from ..common import RECORD, set_threads, with_new_keys
from ..config import DemoRunConfig
from .arms import ARMS, BASE
from .decision import RULE, decide_sets
from .items import facts_size
from .pipeline import base_seed, convert, evaluations
from .pooled import item_matrix, pool, seed_features
from .prompts import TRAIN
from .relation_table import table
from .seeds import add_vary_argument, check_same_settings, load_run

RECIPES = ("evaluate",)  # the recipes its stages name
SUBCOMMAND = "second-relation"  # python -m recipes.demo second-relation ...: the entry point that hands the runner down
KEY = "transfer"  # the decision rule's set of the held-out relation's targets (demos.real.decision.TARGETS)
DEV_ITEMS = 100  # --transfer-dev-items: the relation's dev part (the builder's default, 40, is too few to choose on)
FILES = {"dev": "facts_transfer_dev.jsonl", "test": "facts_transfer.jsonl"}
LOG = "second_relation.log"
NEVER_TRAINED = "never_trained.json"


@dataclass(frozen=True)
class Tools:
    """What runs the stages, handed down by the entry point (``recipes/demo.py``): ``compose(config_name, overrides)``,
    the recipes' ``run`` functions by name and the stage runner class."""

    compose: Callable[[str, list[str]], Any]
    runners: dict[str, Callable[[Any], Any]]
    stage_runner: Callable[..., Any]


def prefix(relation: str, split: str) -> str:
    """The evaluation stages' name prefix: ``second_<relation>`` (test), ``dev_second_<relation>`` (dev), as the
    demo's ``transfer`` and ``dev_transfer``."""
    return f"second_{relation}" if split == "test" else f"dev_second_{relation}"


def facts_stage(relation: str) -> str:
    return f"second_{relation}_facts"


def run_config(run_dir: Path) -> DemoRunConfig:
    """The run's settings (``demo.json``, keys added since at their defaults) as the demo's typed config, ``out`` the
    run dir; a DataError naming the file when it is not a real-demo run's."""
    path = Path(run_dir) / RECORD
    try:
        saved = json.loads(path.read_text())
        demo = str(saved["demo"])
        settings = with_new_keys(saved, demo)["settings"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"not a finished real-demo run ({type(e).__name__}: {e})", path=path) from None
    if "real" not in settings:
        raise DataError(f"demo {demo!r} is not a real-model demo", path=path, field="demo")
    node = OmegaConf.merge(OmegaConf.structured(DemoRunConfig),
                           {"demo": demo, "seed": saved["seed"], "out": str(Path(run_dir).resolve()),
                            "real": settings["real"]})
    return OmegaConf.to_object(node)


def trained_arms(run: dict) -> tuple[list[str], list[str]]:
    """``(arms with an adapter, arms without)``: the trained arms of the run's ``summary.json`` (``real``'s keys but
    the base), in the demo's order; an arm has its adapter when ``stages/<arm>/final/adapter_config.json`` exists."""
    names = [a for a in ARMS if a in run["real"] and a != BASE.name]
    have = [a for a in names if (Path(run["_dir"]) / "stages" / a / "final" / "adapter_config.json").is_file()]
    return have, [a for a in names if a not in have]


# -- never trained on ------------------------------------------------------------------------------
def _words(text: Any) -> str:
    return f" {normalize_short_text(str(text)) or ''} "


def stated_facts(train_rows: list[dict], facts: list[dict]) -> list[str]:
    """The items of ``facts`` (clean rows) whose subject and gold (or a gold alias) some prompt of ``train_rows``
    names together, as whole words after normalisation."""
    prompts = [_words(r.get("prompt", "")) for r in train_rows]
    out = []
    for f in facts:
        subject = _words(f["subject"])
        golds = [_words(g) for g in (f["gold"], *f.get("gold_aliases", []))]
        if any(subject in p and any(g in p for g in golds) for p in prompts):
            out.append(str(f["item_id"]))
    return out


def never_trained(built: Path, trained: Path, relation: str) -> dict:
    """Whether the run never trained on ``relation``: its training file ``trained`` is byte for byte the one this
    build made (``built``: the facts dir; the builder's leak rule then holds for the run), or else no training row of
    it has the relation and no training prompt of it states one of the relation's facts (:func:`stated_facts`).
    Returns what was checked (``never_trained.json``); a DataError naming the run's file otherwise."""
    if not trained.is_file():
        raise DataError("the run's training file is missing: cannot check that the relation was never trained on",
                        path=trained)
    if filecmp.cmp(built / "facts_train.jsonl", trained, shallow=False):
        return {"relation": relation, "run_train_file": str(trained), "rule": "byte-identical",
                "what": "the run's training file is this build's, whose leak check states none of the relation's "
                        "facts"}
    rows = [r for _, r in read_records(trained)]
    facts = [r for name in FILES.values() if (built / name).is_file()
             for _, r in read_records(built / name) if r.get("condition") == CLEAN]
    on_relation = sorted({str(r.get("item_id")) for r in rows if r.get("relation") == relation})
    stated = stated_facts(rows, facts)
    if on_relation or stated:
        raise DataError(f"the run trained on {relation!r}: {len(on_relation)} training items of the relation "
                        f"{on_relation[:5]}, {len(stated)} of its facts stated by a training prompt {stated[:5]}",
                        path=trained)
    return {"relation": relation, "run_train_file": str(trained), "rule": "by rows",
            "what": f"the run's training file differs from this build's; none of its {len(rows)} rows has the "
                    f"relation, and no prompt names one of the relation's {len(facts)} items' subject with its gold",
            "train_rows": len(rows), "facts_checked": len(facts)}


# -- the stages --------------------------------------------------------------------------------------
def build_step(cfg: DemoRunConfig, relation: str, dev_items: int) -> Callable[[Path], Path]:
    """Stage ``second_<relation>_facts``: the run's facts set with ``relation`` held out (module docstring, 1.), its
    never-trained check written beside it."""
    trained = Path(cfg.out) / "stages" / TRAIN

    def step(out: Path) -> Path:
        from eval_hooks.builders.facts import build_dir  # deferred: tests patch it

        build_dir(out, seed=cfg.seed, size=facts_size(cfg), fixed_split=int(bool(cfg.real.fixed_split)),
                  invented_items=int(cfg.real.invented_items), transfer_relation=relation,
                  transfer_dev_items=int(dev_items))
        write_json_atomic(Path(out) / NEVER_TRAINED, never_trained(Path(out), trained, relation))
        return Path(out)

    return step


def adapter_step(arm: str) -> Callable[[Path], Path]:
    """Stage ``<arm>``: the arm's trained adapter where the demo left it (``stages/<arm>/final``), so the evaluation's
    ``adapter_path`` names it as the demo's does; nothing is trained or written."""
    def step(out: Path) -> Path:
        final = Path(out) / "final"
        if not (final / "adapter_config.json").is_file():
            raise DataError(f"arm {arm!r} has no trained adapter (adapter_config.json)", path=final)
        return final

    return step


def plan(cfg: DemoRunConfig, relation: str, split: str, arms: list[str], dev_items: int = DEV_ITEMS) -> list[Stage]:
    """The stages of one run (module docstring): the model, the facts build, the base's evaluation, then each arm's
    adapter and evaluation."""
    facts = facts_stage(relation)
    sets = {KEY: (prefix(relation, split), f"{facts}/{FILES[split]}")}
    st = cfg.real.stages
    out = [Stage("convert", call=convert(cfg.real.model)), Stage(facts, call=build_step(cfg, relation, dev_items)),
           *evaluations(BASE.name, st, sets, seed=base_seed(cfg))]
    for arm in arms:
        out += [Stage(arm, call=adapter_step(arm)), *evaluations(arm, st, sets, adapter=arm)]
    return out


def evaluate_run(run: dict, relation: str, split: str, dev_items: int, tools: Tools) -> dict:
    """Run (or reuse) one run's stages under its lock; returns its entry of ``second_relation.json``."""
    cfg = run_config(Path(run["_dir"]))
    arms, missing = trained_arms(run)
    stages = plan(cfg, relation, split, arms, dev_items)
    set_threads(cfg.real.torch_threads)
    made_under = run_provenance()
    runner = tools.stage_runner(Path(run["_dir"]), seed=cfg.seed, compose=tools.compose, runners=tools.runners,
                                prefix="[second-relation]", rerun_stale=True, rerun_changed=True, reuse=str(cfg.reuse),
                                provenance=lambda stage_cfg: stage_provenance(stage_cfg, made_under))
    runner.check(stages, {})  # every stage's config composed before the model loads
    with runner.hold(LOG, key="out"):
        results = runner.run_all(stages)
    p = prefix(relation, split)
    facts_dir = Path(run["_dir"]) / "stages" / facts_stage(relation)
    metrics = {a: {k: results[f"{p}_{a}"].get(k) for k in ("n_items", "accuracy", "sc2w", "unknown_correct_accuracy")}
               for a in (BASE.name, *arms)}
    return {"dir": str(run["_dir"]), "seed": run["seed"], "run_split": run.get("split", "test"), "arms": arms,
            "arms_without_adapter": missing, "metrics": metrics,
            "never_trained": json.loads((facts_dir / NEVER_TRAINED).read_text()),
            "items": {"file": f"{facts_stage(relation)}/{FILES[split]}"}}


# -- pooled over the runs -----------------------------------------------------------------------------
def read_features(entries: list[dict], relation: str, split: str) -> tuple[dict, dict]:
    """``(item ids by seed, {seed: {arm: features}})`` of the runs' evaluations (:func:`demos.real.pooled.features`,
    items in the base's order)."""
    p = prefix(relation, split)
    ids, feats = {}, {}
    for e in entries:
        items, _, _ = item_matrix(Path(e["dir"]) / "stages" / f"{p}_base" / "item_scores.jsonl")
        ids[e["seed"]] = [str(i) for i in items]
        feats[e["seed"]] = seed_features({"_dir": e["dir"], KEY: dict.fromkeys([BASE.name, *e["arms"]])}, KEY, p)
    return ids, feats


def targets(ids: dict, feats: dict, arm: str, relation: str, *, n_boot: int, boot_seed: int) -> list[dict]:
    """Issue 61's three held-out-relation targets of ``arm`` on this relation, by the decision rule (its entries,
    named for the relation)."""
    decided = decide_sets({KEY: (ids, feats)}, arm, n_boot=n_boot, boot_seed=boot_seed)["targets"]
    return [{**t, "name": t["name"].replace("held-out relation", f"second held-out relation ({relation})")}
            for t in decided if t["set"] == KEY]


def pooled(entries: list[dict], relation: str, split: str, dev_items: int, *, n_boot: int = 2000,
           boot_seed: int = 0) -> dict:
    """``second_relation.json``: the runs' entries, the pooled statistics per arm (:func:`demos.real.pooled.pool`:
    item bootstrap paired by item, stratified by seed) and each trained arm's targets."""
    ids, feats = read_features(entries, relation, split)
    stats = pool(feats, n_boot=n_boot, boot_seed=boot_seed)
    arms = [a for a in stats if a != BASE.name]
    return {"relation": relation, "split": split, "transfer_dev_items": dev_items,
            "seeds": sorted(feats), "runs": entries, "n_boot": n_boot, "boot_seed": boot_seed, "rule": RULE,
            "pooled": stats, "targets": {a: targets(ids, feats, a, relation, n_boot=n_boot, boot_seed=boot_seed)
                                         for a in arms}}


# -- the command ------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m demos.real.second_relation", description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="finished real-demo out dirs of the same settings, one per seed")
    ap.add_argument("--relation", default="currency", choices=sorted(RELATIONS),
                    help="the relation held out (never trained on by the runs; default: currency)")
    ap.add_argument("--split", choices=tuple(FILES), default="dev", help="its dev part (default) or its test part")
    ap.add_argument("--out", type=Path, required=True, help="where second_relation.json and .md go")
    ap.add_argument("--transfer-dev-items", type=int, default=DEV_ITEMS,
                    help=f"items of the relation's dev part (default {DEV_ITEMS}); the test part is the rest "
                         "(the full set) or its cap (the small set). Keep it fixed: it is the relation's split")
    ap.add_argument("--n-boot", type=int, default=2000, help="bootstrap replicates")
    ap.add_argument("--boot-seed", type=int, default=0, help="the bootstrap's RNG seed")
    add_vary_argument(ap)
    return ap


def main(argv: list[str], *, tools: Tools) -> int:
    """Evaluate every run (:func:`evaluate_run`), pool them, write ``<out>/second_relation.json`` and ``.md`` and print
    the table; ``tools`` handed down by the entry point."""
    args = _parser().parse_args(argv)
    if args.n_boot < 1 or args.transfer_dev_items < 1:
        _parser().error("--n-boot and --transfer-dev-items must be >= 1")
    runs = [load_run(d) for d in args.runs]
    check_same_settings(runs, tuple(args.vary))
    entries = [evaluate_run(r, args.relation, args.split, args.transfer_dev_items, tools) for r in runs]
    result = pooled(entries, args.relation, args.split, args.transfer_dev_items, n_boot=args.n_boot,
                    boot_seed=args.boot_seed)
    text = table(result)
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / "second_relation.json", result)
    write_text_atomic(args.out / "second_relation.md", text)
    print(text, flush=True)
    print(f"wrote {args.out / 'second_relation.json'} and {args.out / 'second_relation.md'} ({len(runs)} runs, "
          f"{args.split} items of {args.relation})", flush=True)
    return 0


def forward(argv: list[str]) -> None:
    """``python -m demos.real.second_relation``: the arguments checked here (bad ones: one line, exit 2), then this
    process becomes the demo's entry point (``python -m recipes.demo second-relation ...``), which hands the stage
    runner down (module docstring)."""
    _parser().parse_args([a for a in argv if a != "--debug"])
    os.execv(sys.executable, [sys.executable, "-m", "recipes.demo", SUBCOMMAND, *argv])


if __name__ == "__main__":
    forward(sys.argv[1:])
