"""The real demo's arms (:mod:`demos.real.pipeline`): one :class:`DemoArm` entry per arm in :data:`ARMS`, the one
place that knows an arm by name.

An entry is all a run needs of its arm: its summary key (``name``: ``summary.json``'s ``real.<name>`` and
``transfer.<name>``, its stages ``<name>``, ``eval_<name>`` and ``transfer_<name>``), its label and colour in the
report, the seed table and the plots, its training stages (None: the base, evaluated only), the ``real.<switch>``
key that turns it on or off, the arm it continues (the seed plot's arrow), its own targets, and what the report
says of it (the pools a DPO arm trains on, its note, whether its training curves are plotted). The pipeline,
the report and the seed table read arms only from :data:`ARMS` (in its order), so adding an arm is one entry here,
or, from another package, an entry point in the group ``selectrust.demo_arms`` naming a :class:`DemoArm`.
:func:`preflight` checks every arm a run will train, evaluate and plot before its first stage runs.

Override order (:func:`merge_overrides`): a training stage's Hydra overrides come from up to six sources, merged
in the order of :data:`OVERRIDE_ORDER`, so a later one wins a key both set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from selectrust.conditions import BENIGN_CONDITIONS, CORRECT
from selectrust.core.plugins import Registry
from selectrust.core.errors import ConfigError
from trainer.runtime.stage import Stage

from .items import facts_size
from .prompts import GRPO_PROMPTS, GRPO_ROWS, INPUTS, TRAIN, grpo_prompts

TRAIN_RECIPE = "recipe=scope_smollm2_135m"
GRPO_RECIPE = "recipe=scope_grpo_smollm2_135m"
TRAIN_COMMON = ["eval=none", "logger=jsonl"]  # every arm
GROUP = "selectrust.demo_arms"  # the entry-point group of arms from other packages

#: The sources of a training stage's overrides, earliest first: a later source wins a key an earlier one set.
#: ``recipe``: the recipe preset; ``demo``: the demo's own (``demos.config.DEMOS``, e.g. the main job's
#: SCOPE+GRPO steps); ``stage``: ``real.stages.<recipe stage>`` (the user's); ``common``: what every arm sets
#: (:data:`TRAIN_COMMON`); ``arm``: what makes the arm this arm (its algorithm, its prompt rows' format);
#: ``arm_stage``: ``real.stages.<arm>`` (the user's, for this arm only).
OVERRIDE_ORDER = ("recipe", "demo", "stage", "common", "arm", "arm_stage")


def merge_overrides(**sources: Sequence[str]) -> list[str]:
    """The Hydra overrides of one stage: each source's list (keyword by name, any of :data:`OVERRIDE_ORDER`)
    concatenated in :data:`OVERRIDE_ORDER`, whatever order they are passed in (Hydra applies them in turn, so a
    later source wins). Raises TypeError naming a source that is not one of them."""
    unknown = [k for k in sources if k not in OVERRIDE_ORDER]
    if unknown:
        raise TypeError(f"merge_overrides: unknown override source(s) {unknown}; known: {', '.join(OVERRIDE_ORDER)}")
    return [o for name in OVERRIDE_ORDER for o in sources.get(name, ())]


@dataclass(frozen=True)
class DemoArm:
    """One arm of the real demo (see the module docstring).

    ``train(arm, cfg) -> [Stage]``: its training stages (the last one's ``final/`` is the adapter evaluated), of a
    composed ``conf/demo.yaml``; None for the base. ``switch``: the ``real.<switch>`` key that turns it on (true)
    or off (false); where it is None or the arm has none, the arm runs unless it is a ``comparison`` arm, which
    runs only in a demo with comparison arms (``DEMOS[demo].comparison_arms``). ``targets(mine, base,
    checked, checked_label, limits) -> {target: met}``: its own targets against the arm the targets are checked
    on (``limits``: ``demos.real.report.TARGETS``), when it ran. ``pools``: what a DPO arm trains on, of the one
    mined pairs file (the report's sentence of pools; required of an arm whose stages run ``dpo``); ``note``: the
    sentence the report adds about the arm when it trained (``{label}``: its label); ``curves``: the report plots
    its training stage's ``metrics.jsonl`` (``real_training.png``; the first such arm that ran)."""

    name: str
    label: str
    color: str
    train: Callable[["DemoArm", object], list[Stage]] | None = None
    switch: str | None = None
    comparison: bool = False
    continues: str | None = None
    targets: Callable[[dict, dict, dict, str, dict], dict[str, bool]] | None = None
    pools: str | None = None
    note: str | None = None
    curves: bool = False


def drop_ok(x: float | None, base: float | None, drop: float) -> bool:
    """``x`` is at most ``drop`` below ``base`` (False when either is missing)."""
    return x is not None and base is not None and x >= base - drop


def sc2w_share(mine: dict, base: dict) -> tuple[float | None, str]:
    """An arm's SC2W as a share of the base's, and what it is: the **paired** ratio (``mine["paired"]``, written by
    ``demos.real.pipeline.summary_of``: the arm's and the base's switches on the base's clean-correct items, one
    denominator for both) when the metrics have it, else, for a summary written before, the ratio of the two
    unpaired SC2Ws (each on its own clean-correct items). None when either is missing."""
    paired = (mine.get("paired") or {}).get("paired_ratio")
    if paired is not None:
        return paired.get("value"), "paired SC2W"
    sc2w, b_sc2w = mine.get("sc2w"), base.get("sc2w")
    return (sc2w / b_sc2w if sc2w is not None and b_sc2w else None), "unpaired SC2W"


def dpo(algo: str, own: str | None = None, own_full: str | None = None) -> Callable[[DemoArm, object], list[Stage]]:
    """A DPO arm's stage: a fresh LoRA adapter on the base (``<out>/stages/<arm>/final``) trained with
    ``algo=<algo>`` on ``mine``'s pairs, after ``real.stages.dpo``; ``own``: the ``real.stages`` key of this arm's
    own overrides (last); ``own_full``: the key of its overrides on the full facts set (after ``own``, only when
    the run builds that set: settings chosen at that data size, issue 54)."""
    def train(arm: DemoArm, cfg) -> list[Stage]:
        st = cfg.real.stages
        mine = [*(getattr(st, own) if own else []),
                *(getattr(st, own_full) if own_full and facts_size(cfg) == "full" else [])]
        over = merge_overrides(recipe=[TRAIN_RECIPE], stage=st.dpo, common=TRAIN_COMMON, arm=[f"algo={algo}"],
                               arm_stage=mine)
        return [Stage(arm.name, "dpo", over, inputs={"model.path": "convert", "data.train_path": "mine/pairs.jsonl"})]

    return train


def grpo_after(start: str, algo: Sequence[str] = (), own: str | None = None) -> Callable[[DemoArm, object], list[Stage]]:
    """A GRPO arm's stages: ``grpo_prompts`` writes its prompts (``real.grpo_rows``), then GRPO continues
    ``start``'s adapter on them for the demo's own ``grpo`` overrides (``DEMOS``; ``real.stages.grpo`` comes
    after and wins); ``algo``: what makes the arm this arm (e.g. the SFT term), after its rows' format; ``own``: the
    ``real.stages`` key of this arm's own overrides (last). Every GRPO arm of a run reads the same ``grpo_prompts``
    stage (the pipeline declares it once: ``demos.real.pipeline.stages``)."""
    def train(arm: DemoArm, cfg) -> list[Stage]:
        from ..config import DEMOS  # deferred: imports omegaconf

        rows_mode = str(cfg.real.grpo_rows)
        over = merge_overrides(recipe=[GRPO_RECIPE], demo=DEMOS.get(cfg.demo).grpo, stage=cfg.real.stages.grpo,
                               common=TRAIN_COMMON, arm=[*GRPO_ROWS[rows_mode][1], *algo],
                               arm_stage=getattr(cfg.real.stages, own) if own else [])
        return [Stage("grpo_prompts", call=grpo_prompts(cfg.seed, rows_mode), inputs=dict(INPUTS)),
                Stage(arm.name, "grpo", over, inputs={"data.train_path": f"grpo_prompts/{GRPO_PROMPTS}"}, start=start,
                      init_mode="continue")]

    return train


def _misleading_only_targets(mine: dict, base: dict, checked: dict, checked_label: str, limits: dict) -> dict:
    """The Standard-DPO ablation: its correct-context accuracy is below the checked arm's."""
    return {f"misleading-only correct-context accuracy < {checked_label}'s":
            mine["accuracy"][CORRECT] < checked["accuracy"][CORRECT]}


def _knowledge_aware_targets(mine: dict, base: dict, checked: dict, checked_label: str, limits: dict) -> dict:
    """Knowledge-aware SCOPE keeps the base's unknown_correct_accuracy."""
    drop = limits["unknown_correct_drop_max"]
    return {f"knowledge-aware unknown_correct_accuracy >= base - {drop:.2f}":
            drop_ok(mine.get("unknown_correct_accuracy"), base.get("unknown_correct_accuracy"), drop)}


def held_out_targets(name: str, mine: dict, base: dict, limits: dict) -> dict[str, bool]:
    """The held-out items' targets of an arm labelled ``name`` against the base (``limits``:
    ``demos.real.report.TARGETS``): SC2W <= ``sc2w_ratio_max`` x the base's (paired: :func:`sc2w_share`), clean,
    correct and irrelevant accuracy at
    most ``accuracy_drop_max`` below the base's, ``unknown_correct_accuracy`` at most ``unknown_correct_drop_max``
    below. The checked arm's (``demos.real.report.check_targets``) and those of an arm held to them
    (:func:`_as_checked`)."""
    ratio, drop, u_drop = limits["sc2w_ratio_max"], limits["accuracy_drop_max"], limits["unknown_correct_drop_max"]
    share, what = sc2w_share(mine, base)
    out = {f"{name} {what} <= {ratio} x base": share is not None and share <= ratio + 1e-9}
    for c in BENIGN_CONDITIONS:
        out[f"{name} {c} accuracy >= base - {drop:.2f}"] = drop_ok(mine["accuracy"][c], base["accuracy"][c], drop)
    out[f"{name} unknown_correct_accuracy >= base - {u_drop:.2f}"] = drop_ok(
        mine.get("unknown_correct_accuracy"), base.get("unknown_correct_accuracy"), u_drop)
    return out


def _as_checked(name: str) -> Callable[[dict, dict, dict, str, dict], dict[str, bool]]:
    """An arm held to the held-out targets of the checked arm (:func:`held_out_targets`), named with its label
    ``name``. (The held-out relation's and the format targets stay the checked arm's: this callable sees the held-out
    items' metrics only.)"""
    def targets(mine: dict, base: dict, checked: dict, checked_label: str, limits: dict) -> dict[str, bool]:
        return held_out_targets(name, mine, base, limits)

    return targets


#: scope_grpo_sft's SFT term (issue 44: GRPO cannot repair an unknown fact the policy ignores the correct context
#: on, all G answers fail and the group is dropped; CHORD keeps such groups for an SFT term on the gold). 0.1: a
#: first value, so the term's NLL (about 1-3 nats a token on an unknown fact) weighs about as much as GRPO's clipped
#: loss, not more; real.stages.scope_grpo_sft changes it.
SFT_TERM = ("algo.sft_coef=0.1", "algo.sft_rows=zero_variance_failed")

BASE = DemoArm("base", "base", "#4C72B0")
SCOPE = DemoArm("scope", "SCOPE", "#DD8452", train=dpo("scope"), switch="scope", pools="the four balanced pools",
                curves=True)
MISLEADING_ONLY = DemoArm(
    "misleading_only", "misleading-only", "#55A868", train=dpo("standard_dpo"), switch="misleading_only",
    comparison=True, targets=_misleading_only_targets, pools="the misleading pairs alone",
    note="{label} is the paper's Standard-DPO comparison: trained on misleading contexts alone, resisting them can turn "
         "into ignoring context; its correct-context column is where that shows.")
# Not a comparison arm: the arm chosen on the dev items in issue 44, and the one issue 61's chosen arm continues.
KNOWLEDGE_AWARE = DemoArm(
    "knowledge_aware", "knowledge-aware", "#8172B3", train=dpo("scope_knowledge_aware", own="knowledge_aware",
                                                                 own_full="knowledge_aware_full"),
    switch="knowledge_aware", targets=_knowledge_aware_targets,
    pools="the four balanced pools and the unknown_correct pool",
    note="{label} adds pairs on facts the model does not know that prefer the answer the correct context gives.")
# A comparison arm: the full experiment runs it; the main job runs the arm chosen on dev (ka_grpo) instead.
SCOPE_GRPO = DemoArm("scope_grpo", "SCOPE+GRPO", "#C44E52", train=grpo_after("scope"), switch="scope_grpo",
                     comparison=True, continues="scope")
SCOPE_GRPO_SFT = DemoArm("scope_grpo_sft", "SCOPE+GRPO+SFT", "#DA8BC3",
                         train=grpo_after("scope", SFT_TERM, own="scope_grpo_sft"), switch="scope_grpo_sft",
                         comparison=True, continues="scope", targets=_as_checked("SCOPE+GRPO+SFT"))
# The arm chosen on dev in issue 61: the main job runs it (its demo's own switch, DEMOS["real"].switches), and so
# does the full experiment (a comparison arm there).
KA_GRPO = DemoArm("ka_grpo", "knowledge-aware+GRPO", "#8C8C8C", train=grpo_after("knowledge_aware", own="ka_grpo"),
                  switch="ka_grpo", comparison=True, continues="knowledge_aware",
                  targets=_as_checked("knowledge-aware+GRPO"))

#: The arm the targets are checked on: the first of these the run trained: ka_grpo when switched on (the arm chosen on
#: dev in issue 61: knowledge-aware SCOPE continued by GRPO with paired rollouts, real.stages.ka_grpo), else the full
#: experiment's SCOPE+GRPO, else knowledge-aware SCOPE.
CHECKED_ARMS = ("ka_grpo", "scope_grpo", "knowledge_aware", "scope")


def _accept(name: str, obj: object) -> DemoArm:
    """An entry (built in or an entry point) is a :class:`DemoArm` of its own name, with a label and a colour."""
    if not isinstance(obj, DemoArm):
        raise ConfigError(f"demo arm {name!r}: {obj!r} is not a demos.real.arms.DemoArm")
    if obj.name != name or not obj.label or not obj.color:
        raise ConfigError(f"demo arm {name!r}: its entry is named {obj.name!r}, label {obj.label!r}, colour "
                          f"{obj.color!r} (its own name, a label and a colour are required)")
    return obj


#: Every arm, in run and report order: the base, then the trained arms (a later arm may continue an earlier one).
ARMS: Registry[DemoArm] = Registry(
    "demo arm", GROUP, {a.name: a for a in (BASE, SCOPE, MISLEADING_ONLY, KNOWLEDGE_AWARE, SCOPE_GRPO, SCOPE_GRPO_SFT,
                                            KA_GRPO)},
    accept=_accept, error=ConfigError, component=DemoArm)


def label(name: str) -> str:
    """The arm's label in tables and plots."""
    return ARMS.get(name).label


def color(name: str) -> str:
    """The arm's colour in every plot."""
    return ARMS.get(name).color


def trained(name: str) -> bool:
    """Whether the arm trains (every arm but the base)."""
    return ARMS.get(name).train is not None


def arm_on(cfg, name: str) -> bool:
    """Whether the real demo of ``cfg`` runs arm ``name``: ``real.<switch>``; where that is None, the demo's own
    value of it (``demos.config.DEMOS``' ``switches``: the main job's ``scope=False, ka_grpo=True``); where neither
    says or the arm has no switch, every arm but a comparison arm, which runs where the demo runs comparison arms."""
    from ..config import DEMOS  # deferred: imports omegaconf

    arm = ARMS.get(name)
    demo = DEMOS.get(cfg.demo)
    chosen = getattr(cfg.real, arm.switch) if arm.switch else None
    if chosen is None and arm.switch:
        chosen = demo.switch(arm.switch)
    if chosen is None:
        return not arm.comparison or demo.comparison_arms
    return bool(chosen)


def run_arms(cfg) -> list[str]:
    """The trained arms this run runs, in :data:`ARMS` order."""
    return [n for n in ARMS if trained(n) and arm_on(cfg, n)]


def evaluated_arms(cfg) -> list[str]:
    """The trained arms this run evaluates (:func:`run_arms`), in :data:`ARMS` order: every one, or with
    ``real.evaluate_continued=false`` those no other arm of the run continues (the test seeds' protocol of issue 61:
    knowledge-aware SCOPE is trained as ka_grpo's start and not evaluated, about 140 s a seed)."""
    running = run_arms(cfg)
    if cfg.real.evaluate_continued:
        return running
    continued = {ARMS.get(n).continues for n in running}
    return [n for n in running if n not in continued]


def preflight(cfg) -> list[str]:
    """Check, before any stage runs, everything a run of ``cfg`` will train, plot and report, and return the
    trained arms it runs (:func:`run_arms`): every entry loads as a :class:`DemoArm` (a name, a label, a colour
    matplotlib knows), a switch is a key of ``real``, the arm an arm continues runs before it, an arm that trains
    with ``dpo`` names the pools it trains on (the report's sentence of pools), and the run trains one of
    :data:`CHECKED_ARMS`. Raises ConfigError in one line otherwise (an arm plugin that is broken: the registry's
    ``PluginError``, naming it: an installed arm runs in every real demo, so it is never left out silently)."""
    from matplotlib.colors import is_color_like  # deferred: imports matplotlib

    running: list[str] = []
    for name in ARMS.names():
        arm = ARMS.get(name)
        if not is_color_like(arm.color):
            raise ConfigError(f"demo arm {name!r}: colour {arm.color!r} is not a matplotlib colour")
        if arm.switch is not None and not hasattr(cfg.real, arm.switch):
            raise ConfigError(f"demo arm {name!r}: its switch real.{arm.switch} is not a key of the demo's `real` "
                              "settings (demos/config.py)")
        if arm.train is None or not arm_on(cfg, name):
            continue
        if arm.continues is not None and arm.continues not in running:
            raise ConfigError(f"demo arm {name!r} continues {arm.continues!r}, which this run does not train before "
                              f"it (arms: {running})")
        if arm.pools is None and any(stage.recipe == "dpo" for stage in arm.train(arm, cfg)):
            raise ConfigError(f"demo arm {name!r} trains with dpo but names no `pools` (what it trains on, of the mined "
                              "pairs file: the report's sentence of pools)")
        running.append(name)
    if not any(n in running for n in CHECKED_ARMS):
        raise ConfigError(f"the real demo's targets are checked on one of {list(CHECKED_ARMS)}; this run trains "
                          f"{running}")
    return running
