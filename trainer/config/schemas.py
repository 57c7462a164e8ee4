"""Group schemas: the typed config groups (model, optim, trainer, eval, data, algo, ...) every root schema
of :mod:`trainer.config.roots` is built from; the single home of every default and its documentation.

Each recipe's primary YAML (``conf/<recipe>.yaml``) starts its defaults list with a root schema registered
by :mod:`trainer.config.composition`, so Hydra merges every group file into a typed node: a misspelt key, a
value of the wrong type or one outside a :class:`~trainer.config.choices.Choice` field's set fails at
compose time, before any model or data loads. Field docs live in ``metadata["help"]`` (one text per field;
``--help`` prints them). Importing this module does not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, make_dataclass, MISSING as NO_DEFAULT, fields, make_dataclass
from typing import Any, Optional

from omegaconf import MISSING

from selectrust.conditions import SCOPE_MASS_DEFAULTS as MASS
from selectrust.generation.backends import get_backend, loadable_backend_names
from eval_hooks.families import FAMILIES, settings_fields
from selectrust.core.settings import setting as schema_field  # a field with its default and help text
from selectrust.model.settings import LoraConfig, ModelConfig  # the foundation's (load_policy reads them)
from trainer.config.choices import (Aggregation, Backend, Device, DistillMode, DistillPipelineKind, DistillPromptStyle,
                                    DistillSource, DistillStage, DistillTeacher, DPOLossType, Family,
                                    InitAdapterMode, ISCorrection, KnowledgeScore, LoggerKind, MixedPrecision, OnInvalid,
                                    Pairing, Reference, RolloutModeName, RunDirLayout, Scheduler, SftRows, SftSchedule, StdScaling, TopkSupport, Truncation, Weighting,
                                    _choices)
from trainer.dpo.losses import DPO_LOSSES
from trainer.dpo.losses import SUMMARIES as LOSS_SUMMARIES
from trainer.rl.oversample import MAX_OVERSAMPLE_CAP, MAX_ROUND_COMPLETIONS
from trainer.runtime.lr_decay import DECAYS
import typing

_f = schema_field


def named(names, summaries: dict[str, str]) -> str:
    """``a (its summary) | b | ...``: a help text's list of every name of a registry or dispatch table (in its
    order), each with its summary where it has one, so the help cannot drift from the names the code accepts."""
    return " | ".join(f"{n} ({summaries[n]})" if summaries.get(n) else n for n in names)


# ---------------------------------------------------------------------------------------------
# Groups shared by every recipe
# ---------------------------------------------------------------------------------------------
@dataclass
class OptimConfig:
    lr: float = _f(5e-6, "Peak learning rate (AdamW).")
    weight_decay: float = _f(0.0, "AdamW weight decay.")
    betas: list[float] = _f([0.9, 0.999], "AdamW betas.")
    eps: float = _f(1e-8, "AdamW epsilon.")
    scheduler: Scheduler = _f("cosine", named(DECAYS, {}) + " (all after linear warmup).")
    warmup_ratio: float = _f(0.1, "Fraction of max_steps spent in linear warmup.")
    max_grad_norm: float = _f(1.0, "Clip the global gradient norm to this; <= 0 disables clipping.")
    batch_size: int = _f(4, "Micro-batch size per device (examples per forward).")
    grad_accum: int = _f(8, "Micro-batches accumulated per optimizer step.")


@dataclass
class TrainerConfig:
    run_dir: str = _f("runs/default", "Run directory (shared by all ranks): config, metrics.jsonl, checkpoints, eval.")
    max_steps: int = _f(300, "Optimizer steps to train for; the LR schedule is defined over this many.")
    stop_at_step: Optional[int] = _f(None, "Stop (with a checkpoint) at this step without changing the schedule; resume later.")
    epochs_cap: Optional[int] = _f(None, "Also stop after this many passes over the training data.")
    log_every: int = _f(1, "Write a metrics.jsonl line every this many optimizer steps.")
    save_every: int = _f(100, "Checkpoint every this many optimizer steps (and always at the end); 0 = only at the end.")
    keep_last: int = _f(2, "Keep this many complete checkpoints; older ones are deleted only after a newer one completes.")
    resume: str = _f("auto", "auto (newest complete checkpoint in run_dir, if any) | none | <checkpoint path>.")
    allow_config_change: bool = _f(False, "Allow resuming with a config that differs from the saved one.")
    allow_data_change: bool = _f(False, "Allow resuming although a data file's content hash differs from the one "
                                        "recorded in <run_dir>/data_hashes.json at the run's start.")
    overwrite: bool = _f(False, "Start a new run in a run_dir that holds a previous one: the old run is moved "
                                "aside to <run_dir>.old-<n> first (without it, trainer.resume=none there is refused).")
    device: Device = _f("auto", "auto | cpu. 'cpu' forces CPU even when CUDA is present.")
    mixed_precision: MixedPrecision = _f("no", "no | bf16 | fp16 (accelerate autocast; weights, LoRA parameters, "
                                               "optimizer state and log-probs stay fp32) | auto (bf16 where the "
                                               "hardware gains from it: a CUDA GPU with bf16, or a CPU with AMX-BF16 "
                                               "(not AVX512-BF16 alone, where bf16 GEMMs ran at half fp32's speed); "
                                               "else no, with a message).")
    max_consecutive_skips: int = _f(5, "Stop after this many consecutive steps skipped for NaN/Inf loss or gradients.")
    spike_factor: float = _f(5.0, "Log a loss spike when the loss exceeds this multiple of its running mean.")
    spike_ema_decay: float = _f(0.9, "Decay of that running mean (an exponential moving average of the step loss): "
                                     "mean <- decay * mean + (1 - decay) * loss. Closer to 1 = longer memory.")
    spike_warmup_steps: int = _f(10, "Flag no spike before this optimizer step (the running mean of the first steps "
                                     "still follows the fast initial drop of the loss).")
    eval_every_epoch: bool = _f(True, "Run the matched evaluation at the end of every epoch.")
    eval_at_end: bool = _f(True, "Run the matched evaluation once more when training ends (if it did not just run).")
    progress: bool = _f(True, "Show a progress bar on the main process.")
    run_dir_layout: RunDirLayout = _f("auto", "Several nodes: auto (find out at start whether every node sees the same "
                                              "trainer.run_dir) | shared (refuse to start unless it does: a cluster file "
                                              "system) | node_local (refuse unless each node has its own: every node's "
                                              "local rank 0 then writes a full checkpoint there; resume needs a step "
                                              "complete on every node). One node: ignored. launch/README.md#several-nodes.")
    dist_timeout_s: int = _f(1800, "Seconds a rank waits in a collective (all-reduce, barrier) before it fails with one "
                                   "line: bounds the wait for a node that hangs or vanishes without closing its "
                                   "connections (a killed process is noticed at once). Must exceed the longest work "
                                   "one rank does while the others wait (the main process's evaluation, a save).")


@dataclass
class EvalGroupConfig:
    """The ``eval`` group's own keys; :data:`EvalConfig` adds every family's settings to them."""

    enabled: bool = _f(True, "Run matched evaluation at epoch ends.")
    path: Optional[str] = _f(None, "Evaluation items: JSONL/Parquet file, save_to_disk directory, "
                                   "'hf:org/name[:config][:split]' or a registered data source; None disables evaluation.")
    family: Family = _f("mist", " | ".join(FAMILIES) + ".")  # the family registry
    max_rows: Optional[int] = _f(None, "Evaluate about this many rows: whole items (all their conditions) are kept "
                                       "together, so the last item may take the count past it (max_rows=3 of "
                                       "4-condition items evaluates 4 rows).")
    max_new_tokens: Optional[int] = _f(None, "Generation budget per row; None = the family's default for the rows "
                                             "(eval_hooks Family.default_max_new_tokens: MIST from the answer types, "
                                             "short_text 32, numeric/boolean/multiple_choice 512; other families 256). "
                                             "An explicit value (a preset's or the command line's) wins.")
    knowledge_path: Optional[str] = _f(None, "Per-item knowledge labels (knowledge.jsonl of recipes/mine_pairs.py or "
                                             "recipes/evaluate.py with knowledge.enabled), for a family whose metrics "
                                             "split by them (Family.knowledge_labels: mist); metrics.json then has every "
                                             "MIST metric per label (by_knowledge) and unknown_correct_accuracy.")


def eval_config_schema() -> type:
    """The ``eval`` group's schema: :class:`EvalGroupConfig` plus every registered family's own settings
    (``eval_hooks.families.settings_fields``: the section ``eval.<name>``, or keys at the top for a family with
    ``flat_settings``), so each family declares its settings with its registration, an entry-point family too."""
    own = [f.name for f in fields(EvalGroupConfig)]
    doc = "The ``eval`` group: its own keys (:class:`EvalGroupConfig`) and every family's settings."
    return make_dataclass("EvalConfig", settings_fields(own), bases=(EvalGroupConfig,),
                          namespace={"__module__": __name__, "__doc__": doc})


#: the ``eval`` group's schema, built once from the families registered when the config is first imported
EvalConfig = eval_config_schema()


@dataclass
class PromptConfig:
    """How every prompt becomes token ids, read alike by mining, every trainer and evaluation
    (``selectrust.generation.prompts.render_prompt``; its docstring states the BOS and separator rules)."""

    use_chat_template: bool = _f(True, "Render prompts with the tokenizer's chat template (generation prompt added, "
                                       "no extra BOS). False (or a tokenizer without a template): plain text, turns "
                                       "joined by a blank line, one newline before the completion, the tokenizer's "
                                       "BOS in front if it adds one to plain text.")
    system_prompt: Optional[str] = _f(None, "System turn put before every prompt (mining, training and evaluation).")
    prompt_prefix: Optional[str] = _f(None, "Text put before every user prompt, followed by a blank line (the "
                                            "Prompt-Defense baseline's warning: prompt=prompt_defense).")
    chat_template_kwargs: dict[str, Any] = _f({}, "Extra keyword arguments of apply_chat_template, e.g. "
                                                  "{enable_thinking: false} for Qwen3 (prompt=qwen3_no_thinking, "
                                                  "or +prompt.chat_template_kwargs.enable_thinking=false); they "
                                                  "reach the trainer's "
                                                  "batches and the generation backends (vLLM requests are rendered "
                                                  "client side with them).")


def _backend_help() -> str:
    return " | ".join(f"{n} ({get_backend(n).summary})" for n in loadable_backend_names()) + (
        ". Pick one with generation=<name> (conf/generation/<name>.yaml): the other keys of this group are that "
        "backend's own (selectrust/generation/backends/<name>.py).")


@dataclass
class GenerationConfig:
    """The ``generation`` group: which backend, then that backend's own keys. ``conf/generation/<name>.yaml`` starts
    its defaults list with ``/generation_schema/<name>@_here_``, the subclass :func:`generation_schema` builds from
    the backend's settings dataclass, so the group is typed by the chosen backend's schema (a key of another
    backend, or a misspelt one, fails at composition)."""

    backend: Backend = _f("hf", _backend_help())


_GENERATION_SCHEMAS: dict[str, type[GenerationConfig]] = {}


def generation_schema(name: str) -> type[GenerationConfig]:
    """The typed ``generation`` node of backend ``name`` (a :class:`GenerationConfig` subclass, built once): ``backend``,
    then the fields of the backend's settings dataclass with their defaults and help texts; a settings field with
    ``choices`` becomes a :class:`~trainer.config.choices.Choice` field."""
    spec = get_backend(name)
    known = _GENERATION_SCHEMAS.get(spec.name)
    if known is not None and known.backend_spec is spec:
        return known
    camel = "".join(part.title() for part in spec.name.split("_"))
    kind = Backend if spec.name in Backend.__members__ else _choices(f"{camel}Backend", (*Backend.__members__, spec.name))
    cols: list[tuple] = [("backend", kind, _f(spec.name, _backend_help()))]
    hints = typing.get_type_hints(spec.settings)
    for f in fields(spec.settings):
        typ = hints[f.name]
        if "choices" in f.metadata:
            typ = _choices(f"{camel}{''.join(p.title() for p in f.name.split('_'))}", f.metadata["choices"])
        default = ({"default_factory": f.default_factory} if f.default is NO_DEFAULT else {"default": f.default})
        cols.append((f.name, typ, field(metadata=f.metadata, **default)))
    schema = make_dataclass(f"{camel}GenerationConfig", cols, bases=(GenerationConfig,),
                            namespace={"backend_spec": spec, "__doc__": f"generation={spec.name}: {spec.summary}."})
    schema.__module__ = __name__
    _GENERATION_SCHEMAS[spec.name] = schema
    return schema


@dataclass
class LoggerConfig:
    kind: LoggerKind = _f("jsonl", "jsonl (always on) | wandb (also logs to Weights & Biases; offline when no credentials).")
    project: str = _f("selectrust", "wandb project.")
    name: Optional[str] = _f(None, "wandb run name (None = basename of run_dir).")


@dataclass
class DataConfig:
    train_path: str = _f(MISSING, "Training data: a JSONL/Parquet file, a datasets save_to_disk directory (':<split>' "
                                  "for a DatasetDict), 'hf:org/name[:config][:split]', or '<source>:<rest>' of a "
                                  "registered data source (selectrust/core/data_sources.py).")
    train_family: Optional[Family] = _f(None, "For recipes that train on evaluation-format items (e.g. box2 for GRPO).")
    train_conditions: list[str] = _f([], "Keep only these conditions/regimes of train_family rows (empty = all).")
    max_prompt_len: int = _f(512, "Max prompt tokens; see truncation.")
    max_completion_len: int = _f(256, "Max completion tokens; longer completions are cut at the end (a pair whose "
                                      "chosen and rejected are then identical is invalid: see on_invalid).")
    truncation: Truncation = _f("keep_end", "Long prompts: keep_end (drop the start) | keep_start | drop (drop the example) | error.")
    group_by_length: bool = _f(False, "SFT and DPO: sort each window of 16 micro-batches of draws by length, cut it into "
                                      "micro-batches and shuffle their order (less padding; same draws, same mass).")
    on_invalid: OnInvalid = _f("drop", "Invalid examples (identical chosen/rejected, also once cut to max_completion_len; "
                                       "empty completion, ...): drop (counted in data_stats.json by reason) | error.")
    shared_prompt: bool = _f(True, "DPO: run each pair's prompt once for chosen and rejected (one packed prompt+chosen+rejected "
                                   "row, block attention mask, restarted positions; equal to the two-sequence batch within "
                                   "float round-off, fewer tokens). False = two sequences per pair, as TRL.")


# ---------------------------------------------------------------------------------------------
# Algorithms
# ---------------------------------------------------------------------------------------------
@dataclass
class DPOAlgoConfig:
    name: str = _f("scope", "Label for this variant (scope, standard_dpo, unmatched, no_clean, ...).")
    beta: float = _f(0.1, "DPO temperature β in s(z,r) = β log π/π_ref.")
    label_smoothing: float = _f(0.0, "Conservative-DPO label smoothing ε (0 = plain sigmoid DPO).")
    loss_type: DPOLossType = _f("sigmoid", "The DPO-style loss (trainer.dpo.losses.DPO_LOSSES): "
                                + named(DPO_LOSSES, LOSS_SUMMARIES) + ".")
    simpo_gamma: float = _f(0.5, "SimPO's target reward margin γ (loss_type=simpo only): -log σ(β(logp_c - logp_r) - γ) "
                                 "on per-token mean log-probs; TRL's CPOConfig.simpo_gamma. >= 0.")
    lambda_m: float = _f(MASS["lambda_m"], "λ_m: mass of the misleading pool.")
    lambda_c: float = _f(MASS["lambda_c"], "λ_c: mass of the clean pool.")
    lambda_p: float = _f(MASS["lambda_p"], "λ_p: mass of the non-adversarial pools (split by ρ).")
    rho: float = _f(MASS["rho"], "ρ: share of λ_p given to correct-context pairs; 1-ρ goes to irrelevant.")
    weighting: Weighting = _f("sample", "sample (λ/ρ as sampling mass, the paper) | loss (uniform sampling, per-row loss weights).")
    pairing: Pairing = _f("matched", "matched (same r+/r- under all 4 contexts) | unmatched (r+/r- shuffled across items within a condition).")
    reference: Reference = _f("auto", "auto (adapter-disabled policy with LoRA, frozen copy without; computed every step) | "
                                "precomputed (the same reference, one pass over all pairs before training).")
    sft_on_chosen: bool = _f(False, "Baseline: ignore r- and train NLL on r+ (SFT on chosen).")
    rpo_alpha: float = _f(0.0, "Weight of an NLL term on the chosen completions added to the DPO loss (RPO, Pang et al. "
                               "2024; TRL: loss_type=[sigmoid, sft], loss_weights=[1, rpo_alpha]); keeps r+ and its "
                               "answer format likely while r- is pushed down. 0 = the paper's plain DPO.")
    lambda_u: float = _f(MASS["lambda_u"], "λ_u: sampling mass of the unknown-item pools (algo=scope_knowledge_aware); the four "
                              "SCOPE pools share 1-λ_u in their λ/ρ proportions. 0 = plain SCOPE.")
    unknown_irrelevant: bool = _f(False, "Also draw the unknown_irrelevant pool: λ_u is then split by ρ between "
                                         "unknown_correct and unknown_irrelevant (else unknown_correct gets all of λ_u).")


@dataclass
class SFTAlgoConfig:
    name: str = _f("sft", "Label for this variant (sft, counterfactual_sft, ...).")
    aggregation: Aggregation = _f("token_mean", "token_mean (TRL-compatible) | sequence_mean (each example's mean NLL, "
                                                "averaged over the examples that have a target token).")
    multi_turn: bool = _f(False, "Every assistant turn is a target; user/environment turns are masked.")


@dataclass
class GRPOAlgoConfig:
    name: str = _f("grpo", "Label for this variant.")
    group_size: int = _f(8, "G: samples per prompt.")
    prompts_per_step: int = _f(4, "Prompts (groups) per optimizer step (global).")
    max_new_tokens: int = _f(256, "Rollout generation budget.")
    temperature: float = _f(1.0, "Rollout sampling temperature.")
    top_p: float = _f(1.0, "Rollout nucleus sampling.")
    eps_low: float = _f(0.2, "Lower clip: ratio >= 1 - eps_low.")
    eps_high: float = _f(0.28, "Upper clip: ratio <= 1 + eps_high (DAPO clip-higher).")
    aggregation: Aggregation = _f("token_mean", "token_mean (DAPO) | sequence_mean (GRPO: each sample's mean, averaged "
                                                "over all samples; one without a completion token counts as 0).")
    std_scaling: StdScaling = _f("group", "Advantage std normalisation: group | batch | none.")
    kl_beta: float = _f(0.0, "KL penalty β (k3 estimator) against the adapter-disabled reference; 0 = off.")
    num_iterations: int = _f(1, "Optimizer steps per rollout batch (importance ratios from stored old log-probs).")
    mask_truncated: bool = _f(False, "Exclude completions that hit max_new_tokens from the loss.")
    drop_zero_variance: bool = _f(True, "Drop groups whose rewards all agree, then refill the batch.")
    max_refill_rounds: int = _f(2, "Extra generation rounds allowed to refill dropped groups.")
    oversample_cap: float = _f(2.0, "The first generation round of a rollout batch draws enough prompts to expect the "
                                    "batch full from the running zero-variance rate z (ceil(P / (1 - z)) for P = "
                                    "prompts_per_step), at most oversample_cap * P (trainer/rl/oversample.py); refill "
                                    f"rounds top it up if still short. 1 = no over-sampling. At most {MAX_OVERSAMPLE_CAP:g}, "
                                    f"and a round at most {MAX_ROUND_COMPLETIONS} completions (floor(cap * P) * "
                                    "group_size): the draw grows without end as z nears 1, and a round is held in "
                                    "memory whole.")
    zero_variance_skip: float = _f(0.0, "With drop_zero_variance: a prompt whose last group had zero variance is "
                                        "passed over with this probability when next drawn (GRESO's selective "
                                        "rollouts; trainer/rl/zero_variance_skip.py); 0 = every drawn prompt is "
                                        "generated.")
    shared_prompt: bool = _f(True, "Run each group's prompt once in the policy, old-policy and reference forward (one "
                                   "packed prompt+G completions row, block attention mask, restarted positions; equal to "
                                   "the unshared batch within float round-off, fewer tokens; multi-turn episodes share "
                                   "their first turn). Applies under model.attn_implementation sdpa or eager (flash "
                                   "kernels ignore the mask: a log line says it falls back). False = every sample "
                                   "whole, as TRL.")
    reward: str = _f("numeric_match", "Reward registry name (numeric_match | multiple_choice | boolean) or 'pkg.module:function'.")
    max_reward_errors: int = _f(20, "Stop after this many reward-function errors (raise or non-finite).")
    reward_timeout_s: float = _f(30.0, "A reward call running longer than this counts as a reward error (0 = no limit).")
    stop: list[str] = _f([], "Stop strings for rollouts.")
    is_correction: ISCorrection = _f("none", "Rollout/trainer mismatch correction: none | token | sequence (truncated IS).")
    is_cap: float = _f(2.0, "Truncation cap of the importance-sampling correction.")
    rollout_mode: RolloutModeName = _f("single_turn", "How a prompt row's samples are drawn: single_turn (G completions, "
                                                      "group advantages) | paired_context (Knowledgeable-R1, arXiv "
                                                      "2506.05154: G completions with the row's context and G without "
                                                      "it, trained as 3G rows with local and global advantages; rows "
                                                      "need a `context` their prompt holds as a paragraph of its "
                                                      "own, set off from the question by a blank line ('\\n\\n'); "
                                                      "optim.batch_size x "
                                                      "grad_accum x world = 3 x prompts_per_step x group_size; "
                                                      "trainer/rl/paired_rollouts.py). Not with algo.env.")
    env: Optional[str] = _f(None, "Multi-turn environment: a name in trainer.rl.envs.ENVIRONMENTS (e.g. toy_lookup; webshop is a "
                                  "template) or an import path 'pkg.module:Class'; "
                                  "None = single-turn prompts scored by algo.reward.")
    env_max_turns: Optional[int] = _f(None, "Maximum assistant turns per environment episode (reward 0 when exceeded); "
                                            "None = the environment's own max_turns (4 unless its class sets one).")
    sft_coef: float = _f(0.0, "Weight of an SFT term mixed into the GRPO loss (CHORD, arXiv 2508.11408): the masked "
                              "token NLL of a target completion (sft_target) on the prompt rows sft_rows picks, in "
                              "a separate unshared forward; 0 = off (the loss is exactly GRPO's). Single-turn only.")
    sft_schedule: SftSchedule = _f("constant", "How sft_coef moves: constant | linear_decay (sft_coef x (1 - step / "
                                               "trainer.max_steps), the step counted from 0).")
    sft_rows: SftRows = _f("zero_variance_failed", "Which prompt rows of a rollout batch (every group generated, "
                                                   "refill rounds and dropped groups included) get the SFT target: "
                                                   "zero_variance_failed = groups whose G rewards are all 0 (or "
                                                   "below), the groups GRPO has no gradient on | correct_context = "
                                                   "every row whose `condition` is correct (rows need the field).")
    sft_target: str = _f("The answer is {gold}.", "The SFT target completion, a Python format string over the row's "
                                                  "fields ({gold}, {subject}, ...), EOS appended. The default is a "
                                                  "wording SmolLM2-135M-Instruct itself uses for facts (its mined "
                                                  "correct-context answers include 'The answer is Bolivia.'), the "
                                                  "same for every relation, and scored right by answer_match.")


# ---------------------------------------------------------------------------------------------
# Distillation
# ---------------------------------------------------------------------------------------------
@dataclass
class DistillAlgoConfig:
    name: str = _f("distill", "Label for this variant.")
    stage: DistillStage = _f("kl", "kl (stage 1: teacher-to-student KL) | calibration (stage 2: choice cross-entropy on the "
                          "student's own reasoning).")
    mode: DistillMode = _f("teacher_tokens", "Stage 1: teacher_tokens (the KL on reasoning the teacher wrote, the paper) | "
                                     "on_policy (the student writes the tokens, OPSD).")
    teacher: DistillTeacher = _f("initial", "initial (the frozen starting weights: the adapter-disabled model) | current (the "
                                 "policy itself under no-grad, self-distillation).")
    topk: int = _f(100, "K of the top-K support of the token KL (plus one remainder bucket).")
    topk_support: TopkSupport = _f("student", "Whose top-K is the support: student (the paper) | teacher | union.")
    kl_temperature: float = _f(1.0, "Softmax temperature of both distributions in the token and choice KL.")
    token_kl_weight: float = _f(1.0, "Weight of the token KL term (a mean over the micro-batch's sampled positions).")
    choice_kl_weight: float = _f(1.0, "Weight of the choice KL term (a mean over the micro-batch's views).")
    max_positions: int = _f(512, "At most this many reasoning positions per view (sampled, seeded by seed, view and "
                                 "epoch); <= 0 = all.")
    teacher_cache: bool = _f(False, "Compute the teacher's top-K once per view before training and reuse it (needs "
                                    "topk_support=teacher, teacher=initial, mode=teacher_tokens).")
    teacher_temperature: float = _f(1.0, "Sampling temperature of the teacher's reasoning.")
    student_temperature: float = _f(1.0, "Sampling temperature of the student's reasoning (calibration, on_policy).")
    max_reasoning_tokens: int = _f(3072, "Generation budget of a reasoning block (teacher and student).")
    min_reasoning_tokens: int = _f(32, "A teacher reasoning block shorter than this is dropped (with its item).")
    reasoning_end: str = _f("</think>", "Text that closes a well-formed reasoning block (the block is cut after it).")
    answer_prefix: str = _f("ANSWER:", "Text appended after the reasoning; the choice position follows it.")
    choice_tokens: list[str] = _f([" A", " B"], "The two choice strings (one token each) read at the choice position.")
    calibration_temperature: float = _f(2.0, "Softmax temperature of the calibration CE; evaluation reports the "
                                             "choice probability (and its ECE) at this temperature too.")
    demonstration: str = _f("Demonstration (for you only): the right move at this fork is: {right} Avoid: {wrong}",
                            "What the teacher's prompt adds after the evaluation prompt (data.prompt_style=taste).")


@dataclass
class DistillDataConfig:
    source: DistillSource = _f("files", "files (train_path/eval_path) | toy (the CPU toy fork task, built in <run_dir>/data) | "
                                        "mist (no longer a data source: an error pointing to pipeline.kind=opsd).")
    train_path: Optional[str] = _f(None, "Items to train on: taste forks (every item needs task_id) or, with "
                                         "prompt_style=mist, MIST quartets (any data path: a file, hf:..., a registered source).")
    eval_path: Optional[str] = _f(None, "Held-out taste fork items (task-disjoint from train_path), or null.")
    prompt_style: DistillPromptStyle = _f("taste", "taste (the evaluation prompt of the taste family) | compact (the toy's one line) | "
                                                   "mist (OPSD: the student sees an item's misleading MIST prompt, the "
                                                   "teacher the same item's clean prompt; no choice position, so it needs "
                                                   "algo.mode=on_policy, algo.stage=kl, algo.choice_kl_weight=0).")
    toy_tasks: int = _f(80, "data.source=toy: number of tasks (4 forks each), split into two task-disjoint folds.")


@dataclass
class DistillPipelineConfig:
    kind: DistillPipelineKind = _f("taste", "taste (stage 1 KL, stage 2 calibration, the held-out taste evaluation) | opsd "
                                            "(SCOPE's OPSD baseline on MIST items: an optional base SFT on base_sft_path, "
                                            "on-policy distillation on data.train_path, the 4-condition MIST evaluation of "
                                            "eval_sets; needs data.prompt_style=mist).")
    base_model: str = _f("tiny-demo", "data.source=toy or kind=opsd: the tiny preset the base SFT starts from.")
    base_sft: list[str] = _f([], "data.source=toy or kind=opsd: overrides of recipes/sft.py for the base (toy: a demonstration "
                                 "follower; recipe=opsd_tiny: the demo's hint follower, conf/demo.yaml toy.stages.base_sft).")
    base_sft_path: Optional[str] = _f(None, "kind=opsd: SFT data of the base stage (trained from base_model with "
                                            "base_sft); null = no base stage, the student starts from model.path.")
    stage1: list[str] = _f([], "Overrides of the stage-1 (KL) run, on top of this config.")
    stage2: list[str] = _f([], "Overrides of the stage-2 (calibration) run; empty list = no stage 2.")
    eval_batch_size: int = _f(64, "Views per forward in the pipeline's evaluations.")
    evaluate: list[str] = _f([], "kind=opsd: overrides of recipes/evaluate.py for the MIST evaluations of "
                                 "base and student (like conf/demo.yaml toy.stages.evaluate).")
    eval_sets: list[str] = _f([], "kind=opsd: MIST item files on which base and student are evaluated (the first is "
                                  "the headline split of summary.json; each split is keyed by its file name's stem).")


@dataclass
class AdviceConfig:
    forks_path: Optional[str] = _f(None, "recipes/advise.py: taste fork items to write advice for.")
    adapters: list[str] = _f([], "recipes/advise.py: adapters merged into model.path in order (e.g. stage1/final, "
                                 "stage2/final of a distillation run).")
    out: Optional[str] = _f(None, "recipes/advise.py: the advice JSONL file to write.")
    template: str = _f("At this decision point, take the direction \"{favoured}\" rather than \"{other}\".",
                       "Advice note; {favoured}, {other} (candidate texts) and {score} (summed log-odds) are filled in.")


@dataclass
class KnowledgeConfig:
    """Per-item knowledge estimate (docs/scope.md#knowledge-aware-scope; eval_hooks/knowledge.py)."""

    enabled: bool = _f(False, "Estimate per item whether the model knows the answer without context.")
    k: int = _f(4, "Clean samples per item; 1 = one greedy answer.")
    temperature: float = _f(1.0, "Sampling temperature of the k clean samples (ignored when k=1).")
    score: KnowledgeScore = _f("accuracy", "What the thresholds apply to: accuracy = the share of the k clean answers "
                                           "that are right (k=1: the greedy answer, 1 or 0); greedy_prob = the greedy "
                                           "clean answer's probability p (geometric mean over its tokens), (1+p)/2 "
                                           "when right, (1-p)/2 when wrong; combined (k>=2) = the mean of the two. "
                                           "greedy_prob and combined need token log-probs (not openai_chat).")
    known_threshold: float = _f(0.75, "Known: score >= this (greedy_prob, combined: must be > 0.5; greedy_prob 0.75 = "
                                      "right with p >= 0.5).")
    unknown_threshold: float = _f(0.25, "Unknown: score <= this (greedy_prob, combined: must be < 0.5; greedy_prob 0.25 "
                                        "= wrong with p >= 0.5); in between: uncertain (in no new pool).")
    unknown_irrelevant: bool = _f(False, "Mining: also build the unknown_irrelevant pool for unknown items whose clean "
                                         "answer is stable.")
    stable_threshold: float = _f(0.75, "Stable: the most frequent clean answer has at least this share of the k samples.")


@dataclass
class StageConfig:
    """One stage of a chain (recipes/chain.py): a trainer config run in ``<run_dir>/stages/<name>/``."""

    script: str = _f(MISSING, "The stage's trainer: sft | dpo | grpo | distill (recipes/<script>.py composed from conf/<script>.yaml).")
    overrides: list[str] = _f([], "Hydra overrides of that trainer's config, e.g. recipe=box2_sft_tiny, model.lora.r=8.")
    extra: list[str] = _f([], "More overrides applied after `overrides` and `common` (for the command line: "
                              "stages.<name>.extra=[data.train_path=...]).")
    init_from: Optional[str] = _f("previous", "Start from this stage's final/: previous | <stage name> | null (model.path "
                                              "alone). An adapter becomes model.init_adapter; a full model, model.path.")
    init_mode: InitAdapterMode = _f("merge", "model.init_adapter_mode when starting from an adapter: merge | continue.")


@dataclass
class ChainTrainerConfig:
    run_dir: str = _f("runs/chain", "Chain directory: stage <name> trains in <run_dir>/stages/<name>/; chain.json sums up.")
    rerun_stale_stages: bool = _f(False, "Retrain a stage whose recorded start (stage_start.json: content hash of the "
                                         "previous stage's final/ or the base model) differs from its start now, "
                                         "moving its directory to stages/<name>.old-<n> first; false refuses it.")
