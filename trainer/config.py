"""Structured config schemas: the single home of every default and its documentation.

Each recipe's primary YAML (``conf/<recipe>.yaml``) starts its defaults list with the schema
registered here, so Hydra merges every group file into a typed node: a misspelt key, a value of the
wrong type or one outside a :class:`Choice` field's set fails at compose time, before any model or data
loads (the choices come from the algorithm modules, so importing this module imports torch). Semantic
checks (λ sum to one, paths exist, ...) run in ``validate_*`` right after composition, also before any
model loads. Field docs live in ``metadata["help"]`` (one text per field; ``--help`` prints them).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Optional

from omegaconf import MISSING

from eval_hooks.families import FAMILIES
from eval_hooks.vocab import MED_FORMATS, MED_MITIGATIONS
from trainer.algos.distill import SUPPORTS as TOPK_SUPPORTS
from trainer.algos.grpo import STD_SCALINGS
from trainer.algos.is_correction import LEVELS as IS_LEVELS
from trainer.algos.sft import AGGREGATIONS
from trainer.data import ON_INVALID, TRUNCATIONS, WEIGHTINGS


def schema_field(default: Any, help: str, **kw):
    """A schema field with its default and its help text (``--help`` and the docs read ``metadata["help"]``)."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata={"help": help}, **kw)
    return field(default=default, metadata={"help": help}, **kw)


_f = schema_field


class ConfigError(ValueError):
    """A config that composes but makes no sense (raised before any model loads)."""


class Choice(str, Enum):
    """A value from a fixed set. A field typed with one refuses any other value at composition (YAML files
    and the command line give the plain name); a member is a ``str`` equal to its name, so code compares,
    hashes, formats and serialises it as that plain string."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def __repr__(self) -> str:  # messages such as "saved 'x' != now 'y'" read as for a str
        return repr(self.value)


def _choices(name: str, values) -> type[Choice]:
    """A :class:`Choice` over ``values``: built from the tuple the code that acts on the value checks."""
    return Choice(name, [(v, v) for v in values], module=__name__, qualname=name)


# One per choice-valued field; where an algorithm or data module owns the tuple, it comes from there.
Dtype = _choices("Dtype", ("float32", "bfloat16", "float16"))
InitAdapterMode = _choices("InitAdapterMode", ("merge", "continue"))
Scheduler = _choices("Scheduler", ("cosine", "linear", "constant"))
Device = _choices("Device", ("auto", "cpu"))
MixedPrecision = _choices("MixedPrecision", ("no", "bf16", "fp16"))
Truncation = _choices("Truncation", TRUNCATIONS)
OnInvalid = _choices("OnInvalid", ON_INVALID)
Family = _choices("Family", tuple(FAMILIES))
Backend = _choices("Backend", ("hf", "vllm_server"))
LoggerKind = _choices("LoggerKind", ("jsonl", "wandb"))
MedFormat = _choices("MedFormat", MED_FORMATS)
MedMitigation = _choices("MedMitigation", MED_MITIGATIONS)
MedJudge = _choices("MedJudge", ("keyword", "self"))
Weighting = _choices("Weighting", WEIGHTINGS)
Pairing = _choices("Pairing", ("matched", "unmatched"))
Reference = _choices("Reference", ("auto", "precomputed"))
Aggregation = _choices("Aggregation", AGGREGATIONS)
StdScaling = _choices("StdScaling", STD_SCALINGS)
ISCorrection = _choices("ISCorrection", ("none", *IS_LEVELS))
DistillStage = _choices("DistillStage", ("kl", "calibration"))
DistillMode = _choices("DistillMode", ("teacher_tokens", "on_policy"))
DistillTeacher = _choices("DistillTeacher", ("initial", "current"))
TopkSupport = _choices("TopkSupport", TOPK_SUPPORTS)
DistillSource = _choices("DistillSource", ("files", "toy", "mist"))
DistillPromptStyle = _choices("DistillPromptStyle", ("taste", "compact", "mist"))


# ---------------------------------------------------------------------------------------------
# Groups shared by every recipe
# ---------------------------------------------------------------------------------------------
@dataclass
class LoraConfig:
    enabled: bool = _f(True, "Train a LoRA adapter (peft). False = full fine-tuning with a frozen reference copy.")
    r: int = _f(16, "LoRA rank.")
    alpha: int = _f(32, "LoRA alpha (scaling = alpha / r).")
    dropout: float = _f(0.0, "LoRA dropout. Keep 0.0 where runs must be bit-reproducible across resumes.")
    target_modules: list[str] = _f(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        "Module names to wrap; 'all-linear' as the single entry means every linear layer but the head.")


@dataclass
class ModelConfig:
    path: str = _f("tiny", "HF model directory or hub id, or 'tiny' / 'tiny:<preset>' for the built-in random-init Llama.")
    dtype: Dtype = _f("float32", "Weight dtype: float32 | bfloat16 | float16.")
    trust_remote_code: bool = _f(False, "Allow custom modelling code from the model repo. Off unless you trust it.")
    attn_implementation: Optional[str] = _f(None, "e.g. sdpa | flash_attention_2 | eager; None = transformers default.")
    gradient_checkpointing: bool = _f(False, "Recompute activations in backward (saves memory, costs ~30% time).")
    logprob_chunk: int = _f(0, "Log-probs through the LM head this many completion positions at a time, never "
                               "building the (B, T, V) logits (trainer/chunked_logprobs.py); 0 = full logits "
                               "(recipes/distill.py always projects chunk-wise: 0 = 1024 positions there).")
    lora: LoraConfig = field(default_factory=LoraConfig)
    init_adapter: Optional[str] = _f(None, "PEFT adapter directory (safetensors) to start from, e.g. a previous stage's "
                                           "<run_dir>/final; None = start from model.path alone.")
    init_adapter_mode: InitAdapterMode = _f("merge", "merge: fold init_adapter into the base weights in memory, then train a fresh "
                                         "LoRA (or all weights); the reference (DPO, GRPO KL) is the merged model. "
                                         "continue: keep training init_adapter (needs model.lora.enabled; its own r, "
                                         "alpha and targets apply); the reference is a frozen copy of it.")


@dataclass
class OptimConfig:
    lr: float = _f(5e-6, "Peak learning rate (AdamW).")
    weight_decay: float = _f(0.0, "AdamW weight decay.")
    betas: list[float] = _f([0.9, 0.999], "AdamW betas.")
    eps: float = _f(1e-8, "AdamW epsilon.")
    scheduler: Scheduler = _f("cosine", "cosine | linear | constant (all after linear warmup).")
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
    mixed_precision: MixedPrecision = _f("no", "no | bf16 | fp16 (accelerate autocast).")
    max_consecutive_skips: int = _f(5, "Stop after this many consecutive steps skipped for NaN/Inf loss or gradients.")
    spike_factor: float = _f(5.0, "Log a loss spike when the loss exceeds this multiple of its running mean.")
    spike_ema_decay: float = _f(0.9, "Decay of that running mean (an exponential moving average of the step loss): "
                                     "mean <- decay * mean + (1 - decay) * loss. Closer to 1 = longer memory.")
    spike_warmup_steps: int = _f(10, "Flag no spike before this optimizer step (the running mean of the first steps "
                                     "still follows the fast initial drop of the loss).")
    eval_every_epoch: bool = _f(True, "Run the matched evaluation at the end of every epoch.")
    eval_at_end: bool = _f(True, "Run the matched evaluation once more when training ends (if it did not just run).")
    progress: bool = _f(True, "Show a progress bar on the main process.")


@dataclass
class MedEvalConfig:
    formats: list[MedFormat] = _f(list(MED_FORMATS), "MedCounterfact answer formats: mc (multiple choice) and/or free (free text mapped to a label by the judge).")
    mitigations: list[MedMitigation] = _f(list(MED_MITIGATIONS), "MedCounterfact mitigation pipelines run besides the base one (evidence variants only): detect | prior.")
    label_probs: bool = _f(True, "Score P(label) before generation with the backend's score_labels (base pipeline, mc).")
    judge: MedJudge = _f("keyword", "Free-text label and awareness judge: keyword (deterministic heuristic) | self (the evaluated model with fixed judge prompts).")
    prompt_token_budget: Optional[int] = _f(None, "Prompt tokens above which the refine chain walks the evidence in chunks (None = model positions - max_new_tokens - 16).")
    max_refine_chunks: int = _f(8, "At most this many evidence chunks per refine chain (the rest of the evidence is not read).")
    max_questions: Optional[int] = _f(None, "Evaluate only the first N MedEvidence questions (all their items).")
    seed: int = _f(0, "Term-draw seed when eval.path is a raw MedEvidence file (items are then built in memory).")


@dataclass
class EvalConfig:
    enabled: bool = _f(True, "Run matched evaluation at epoch ends.")
    path: Optional[str] = _f(None, "Evaluation items: JSONL/Parquet file, save_to_disk directory, "
                                   "'hf:org/name[:config][:split]' or a registered data source; None disables evaluation.")
    family: Family = _f("mist", "mist | box2 | taste | med.")
    max_rows: Optional[int] = _f(None, "Evaluate about this many rows: whole items (all their conditions) are kept "
                                       "together, so the last item may take the count past it (max_rows=3 of "
                                       "4-condition items evaluates 4 rows).")
    max_new_tokens: int = _f(64, "Generation budget per row.")
    max_prompt_tokens: int = _f(65536, "taste only: prompt-token cap; longer prompts keep the prefix's first 25 lines, an "
                                       "omission marker and the longest tail of lines that fits (the published runner's rule).")
    prompt_tokenizer: Optional[str] = _f(None, "taste only: tokenizer (local dir or 'tiny') that counts tokens for the cap; "
                                               "None = estimate of 4 UTF-8 bytes per token.")
    knowledge_path: Optional[str] = _f(None, "mist only: per-item knowledge labels (knowledge.jsonl of recipes/mine_pairs.py "
                                             "or recipes/evaluate.py with knowledge.enabled); metrics.json then has every "
                                             "MIST metric per label (by_knowledge) and unknown_correct_accuracy.")

    med: MedEvalConfig = field(default_factory=MedEvalConfig)


@dataclass
class PromptConfig:
    """How every prompt becomes token ids, read alike by mining, every trainer and evaluation
    (``eval_hooks.prompts.render_prompt``; its docstring states the BOS and separator rules)."""

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


@dataclass
class GenerationConfig:
    backend: Backend = _f("hf", "hf (in-process, current weights) | vllm_server (HTTP client of a vLLM server).")
    batch_size: int = _f(32, "Generation batch size of the HF backend.")
    url: str = _f("http://127.0.0.1:8000", "vllm_server: base URL of the server.")
    served_model_name: Optional[str] = _f(None, "vllm_server: the base model name the server serves (None = model.path).")
    timeout_s: float = _f(120.0, "vllm_server: per-request timeout.")
    max_retries: int = _f(3, "vllm_server: retries on transient errors, with exponential backoff.")
    sync_every: int = _f(1, "vllm_server: push the LoRA adapter to the server every this many optimizer steps.")
    probe_threshold: float = _f(0.05, "vllm_server: max mean |Δlogp| between server and trainer on the probe sequence.")
    adapter_dir: Optional[str] = _f(None, "vllm_server: shared directory for synced adapters (None = <run_dir>/adapters).")
    server_log: Optional[str] = _f(None, "vllm_server: log file of an externally started server (launch/vllm_server.py "
                                         "--log-path); its last lines are appended to every server error, e.g. when it dies.")


@dataclass
class LoggerConfig:
    kind: LoggerKind = _f("jsonl", "jsonl (always on) | wandb (also logs to Weights & Biases; offline when no credentials).")
    project: str = _f("selectrust", "wandb project.")
    name: Optional[str] = _f(None, "wandb run name (None = basename of run_dir).")


@dataclass
class DataConfig:
    train_path: str = _f(MISSING, "Training data: a JSONL/Parquet file, a datasets save_to_disk directory (':<split>' "
                                  "for a DatasetDict), 'hf:org/name[:config][:split]', or '<source>:<rest>' of a "
                                  "registered data source (trainer/data_sources.py).")
    train_family: Optional[Family] = _f(None, "For recipes that train on evaluation-format items (e.g. box2 for GRPO).")
    train_conditions: list[str] = _f([], "Keep only these conditions/regimes of train_family rows (empty = all).")
    max_prompt_len: int = _f(512, "Max prompt tokens; see truncation.")
    max_completion_len: int = _f(256, "Max completion tokens; longer completions are cut at the end.")
    truncation: Truncation = _f("keep_end", "Long prompts: keep_end (drop the start) | keep_start | drop (drop the example) | error.")
    group_by_length: bool = _f(False, "SFT and DPO: sort each window of 16 micro-batches of draws by length, cut it into "
                                      "micro-batches and shuffle their order (less padding; same draws, same mass).")
    on_invalid: OnInvalid = _f("drop", "Invalid examples (identical chosen/rejected, empty completion, ...): drop (counted, reported) | error.")


# ---------------------------------------------------------------------------------------------
# Algorithms
# ---------------------------------------------------------------------------------------------
@dataclass
class DPOAlgoConfig:
    name: str = _f("scope", "Label for this variant (scope, standard_dpo, unmatched, no_clean, ...).")
    beta: float = _f(0.1, "DPO temperature β in s(z,r) = β log π/π_ref.")
    label_smoothing: float = _f(0.0, "Conservative-DPO label smoothing ε (0 = plain sigmoid DPO).")
    lambda_m: float = _f(0.25, "λ_m: mass of the misleading pool.")
    lambda_c: float = _f(0.25, "λ_c: mass of the clean pool.")
    lambda_p: float = _f(0.50, "λ_p: mass of the non-adversarial pools (split by ρ).")
    rho: float = _f(0.50, "ρ: share of λ_p given to correct-context pairs; 1-ρ goes to irrelevant.")
    weighting: Weighting = _f("sample", "sample (λ/ρ as sampling mass, the paper) | loss (uniform sampling, per-row loss weights).")
    pairing: Pairing = _f("matched", "matched (same r+/r- under all 4 contexts) | unmatched (r+/r- shuffled across items within a condition).")
    reference: Reference = _f("auto", "auto (adapter-disabled policy with LoRA, frozen copy without; computed every step) | "
                                "precomputed (the same reference, one pass over all pairs before training).")
    sft_on_chosen: bool = _f(False, "Baseline: ignore r- and train NLL on r+ (SFT on chosen).")
    lambda_u: float = _f(0.0, "λ_u: sampling mass of the unknown-item pools (algo=scope_knowledge_aware); the four "
                              "SCOPE pools share 1-λ_u in their λ/ρ proportions. 0 = plain SCOPE.")
    unknown_irrelevant: bool = _f(False, "Also draw the unknown_irrelevant pool: λ_u is then split by ρ between "
                                         "unknown_correct and unknown_irrelevant (else unknown_correct gets all of λ_u).")


@dataclass
class SFTAlgoConfig:
    name: str = _f("sft", "Label for this variant (sft, counterfactual_sft, ...).")
    aggregation: Aggregation = _f("token_mean", "token_mean (TRL-compatible) | sequence_mean.")
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
    aggregation: Aggregation = _f("token_mean", "token_mean (DAPO) | sequence_mean (GRPO).")
    std_scaling: StdScaling = _f("group", "Advantage std normalisation: group | batch | none.")
    kl_beta: float = _f(0.0, "KL penalty β (k3 estimator) against the adapter-disabled reference; 0 = off.")
    num_iterations: int = _f(1, "Optimizer steps per rollout batch (importance ratios from stored old log-probs).")
    mask_truncated: bool = _f(False, "Exclude completions that hit max_new_tokens from the loss.")
    drop_zero_variance: bool = _f(True, "Drop groups whose rewards all agree, then refill the batch.")
    max_refill_rounds: int = _f(2, "Extra generation rounds allowed to refill dropped groups.")
    reward: str = _f("numeric_match", "Reward registry name (numeric_match | multiple_choice | boolean) or 'pkg.module:function'.")
    max_reward_errors: int = _f(20, "Stop after this many reward-function errors (raise or non-finite).")
    reward_timeout_s: float = _f(30.0, "A reward call running longer than this counts as a reward error (0 = no limit).")
    stop: list[str] = _f([], "Stop strings for rollouts.")
    is_correction: ISCorrection = _f("none", "Rollout/trainer mismatch correction: none | token | sequence (truncated IS).")
    is_cap: float = _f(2.0, "Truncation cap of the importance-sampling correction.")
    env: Optional[str] = _f(None, "Multi-turn environment (trainer.envs): toy_lookup | webshop (template) | 'pkg.module:Class'; "
                                  "None = single-turn prompts scored by algo.reward.")
    env_max_turns: int = _f(4, "Maximum assistant turns per environment episode (reward 0 when exceeded).")


# ---------------------------------------------------------------------------------------------
# Root schemas per recipe
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
                                        "mist (OPSD on MIST items: an optional base SFT on pipeline.base_sft_path, on-policy "
                                        "distillation on train_path, the 4-condition MIST evaluation of pipeline.eval_sets; "
                                        "needs prompt_style=mist).")
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
    base_model: str = _f("tiny-demo", "data.source=toy|mist: the tiny preset the base SFT starts from.")
    base_sft: list[str] = _f([], "data.source=toy|mist: overrides of recipes/sft.py for the base (toy: a demonstration "
                                 "follower; recipe=opsd_tiny: the demo's hint follower, conf/demo.yaml stages.base_sft).")
    base_sft_path: Optional[str] = _f(None, "data.source=mist: SFT data of the base stage (trained from base_model with "
                                            "base_sft); null = no base stage, the student starts from model.path.")
    stage1: list[str] = _f([], "Overrides of the stage-1 (KL) run, on top of this config.")
    stage2: list[str] = _f([], "Overrides of the stage-2 (calibration) run; empty list = no stage 2.")
    eval_batch_size: int = _f(64, "Views per forward in the pipeline's evaluations.")
    evaluate: list[str] = _f([], "data.source=mist: overrides of recipes/evaluate.py for the MIST evaluations of "
                                 "base and student (like conf/demo.yaml stages.evaluate).")
    eval_sets: list[str] = _f([], "data.source=mist: MIST item files on which base and student are evaluated (the first is "
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
class _RunBase:
    seed: int = _f(0, "Global seed (data order, init of adapters, sampling).")
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)


@dataclass
class DPORunConfig(_RunBase):
    algo: DPOAlgoConfig = field(default_factory=DPOAlgoConfig)


@dataclass
class SFTRunConfig(_RunBase):
    algo: SFTAlgoConfig = field(default_factory=SFTAlgoConfig)


@dataclass
class GRPORunConfig(_RunBase):
    algo: GRPOAlgoConfig = field(default_factory=GRPOAlgoConfig)


@dataclass
class DistillRunConfig(_RunBase):
    algo: DistillAlgoConfig = field(default_factory=DistillAlgoConfig)
    data: DistillDataConfig = field(default_factory=DistillDataConfig)  # type: ignore[assignment]
    pipeline: DistillPipelineConfig = field(default_factory=DistillPipelineConfig)
    advice: AdviceConfig = field(default_factory=AdviceConfig)


@dataclass
class KnowledgeConfig:
    """Per-item knowledge estimate (docs/scope.md#knowledge-aware-scope)."""

    enabled: bool = _f(False, "Estimate per item whether the model knows the answer without context.")
    k: int = _f(4, "Clean samples per item; 1 = one greedy answer.")
    temperature: float = _f(1.0, "Sampling temperature of the k clean samples (ignored when k=1).")
    known_threshold: float = _f(0.75, "Known: clean accuracy over the k samples >= this.")
    unknown_threshold: float = _f(0.25, "Unknown: clean accuracy <= this; in between: uncertain (in no new pool).")
    unknown_irrelevant: bool = _f(False, "Mining: also build the unknown_irrelevant pool for unknown items whose clean "
                                         "answer is stable.")
    stable_threshold: float = _f(0.75, "Stable: the most frequent clean answer has at least this share of the k samples.")


@dataclass
class EvaluateRunConfig:
    seed: int = _f(0, "Seed (only matters for sampled generation).")
    out_dir: str = _f("runs/evaluate", "Where metrics.json, item_scores.jsonl and report.md go.")
    adapter_path: Optional[str] = _f(None, "Optional LoRA adapter directory to apply to model.path.")
    model: ModelConfig = field(default_factory=ModelConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    knowledge: KnowledgeConfig = field(default_factory=KnowledgeConfig)


@dataclass
class MineRunConfig:
    seed: int = _f(0, "Seed.")
    items_path: str = _f(MISSING, "MIST-format training items: JSONL/Parquet file, save_to_disk directory, "
                                  "'hf:org/name[:config][:split]' or a registered data source.")
    out_dir: str = _f("runs/mine_pairs", "Writes pairs.jsonl (quartets) and mining_stats.json here.")
    max_new_tokens: Optional[int] = _f(None, "Generation budget for mining; None = the items' answer format's "
                                       "(eval_hooks.parsers.answer_budget: short_text 32, reasoning formats 512, the "
                                       "tiny model 4). Completions cut off by it are dropped (mining_stats.json: cut_off).")
    use_fallback: bool = _f(True, "Elicit r+ with a private diagnostic note when the clean answer is wrong.")
    fallback_note: str = _f("Private note for you only: the correct answer is {gold}. Answer the question normally and do not mention this note.",
                            "Template of the elicitation note ({gold} is filled in). Never part of the DPO prompt.")
    leak_patterns: list[str] = _f(["note", "hint", "answer key", "i was told", "private"],
                                  "Case-insensitive substrings that betray the note; fallbacks containing one are dropped.")
    model: ModelConfig = field(default_factory=ModelConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    knowledge: KnowledgeConfig = field(default_factory=KnowledgeConfig)


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


@dataclass
class ChainRunConfig:
    seed: int = _f(0, "Seed given to every stage.")
    trainer: ChainTrainerConfig = field(default_factory=ChainTrainerConfig)
    common: list[str] = _f([], "Overrides applied to every stage after its own, e.g. model.path=<dir> or eval=none.")
    stages: dict[str, StageConfig] = _f({}, "Stages in run order (a recipe file under conf/recipe/ names them).")


@dataclass
class MergeRunConfig:
    adapters: list[str] = _f(MISSING, "PEFT adapter directories (safetensors) merged into model.path, in this order.")
    out_dir: str = _f(MISSING, "Where the merged model (safetensors, config, tokenizer) is written; must not exist.")
    model: ModelConfig = field(default_factory=ModelConfig)


SCHEMAS = {
    "chain_schema": ChainRunConfig,
    "merge_schema": MergeRunConfig,
    "dpo_schema": DPORunConfig,
    "sft_schema": SFTRunConfig,
    "grpo_schema": GRPORunConfig,
    "distill_schema": DistillRunConfig,
    "evaluate_schema": EvaluateRunConfig,
    "mine_schema": MineRunConfig,
}


def register_schema(name: str, node: type) -> None:
    """Add a root schema (a package's own entry point, e.g. a demo) to :data:`SCHEMAS` and Hydra's
    ConfigStore, so that a ``conf/<x>.yaml`` naming it composes and ``--help`` finds it."""
    known = SCHEMAS.get(name)
    if known is not None and known is not node:
        raise ValueError(f"schema {name!r} is already registered ({known.__module__}.{known.__qualname__})")
    SCHEMAS[name] = node
    register_schemas()


def register_schemas() -> None:
    """Register the root schemas of :data:`SCHEMAS` with Hydra's ConfigStore (idempotent)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    for name, node in SCHEMAS.items():
        cs.store(name=name, node=node)


def help_text(schema: type, prefix: str = "") -> list[tuple[str, str, Any, tuple[str, ...]]]:
    """(key, help, schema default, choices) for every leaf of a schema, in field order: the ``--help`` of
    every entry point (trainer/cli_help.py). ``choices`` are a :class:`Choice` field's values (also of a
    list of them); a ``dict[str, <schema>]`` field is listed, then its entries' keys as ``<key>.<name>.*``."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(schema)
    out = []
    for f in fields(schema):
        key, hint = f"{prefix}{f.name}", hints[f.name]
        args = typing.get_args(hint)
        if is_dataclass(hint):
            out.extend(help_text(hint, key + "."))
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        choice = next((t for t in (hint, *args) if isinstance(t, type) and issubclass(t, Choice)), None)
        out.append((key, f.metadata.get("help", ""), default, tuple(m.value for m in choice) if choice else ()))
        if typing.get_origin(hint) is dict and is_dataclass(args[-1]):
            out.extend(help_text(args[-1], key + ".<name>."))
    return out


# ---------------------------------------------------------------------------------------------
# Semantic validation (runs before any model loads)
# ---------------------------------------------------------------------------------------------
def check_known_keys(cfg, prefix: str = "") -> None:
    """Refuse keys the typed schema does not know, also ones added with Hydra's ``+key=value`` (which
    bypasses the schema's struct check): they would be accepted and silently ignored."""
    from omegaconf import DictConfig, OmegaConf

    schema = OmegaConf.get_type(cfg)
    if not is_dataclass(schema):
        return
    known = {f.name for f in fields(schema)}
    for key in cfg.keys():
        if key not in known:
            raise ConfigError(f"unknown config key '{prefix}{key}' (not in {schema.__name__}; a leading '+' does "
                              f"not make it known); known keys here: {', '.join(sorted(known))}")
        node = cfg._get_node(key)
        if isinstance(node, DictConfig) and not node._is_missing() and not node._is_none():
            check_known_keys(node, f"{prefix}{key}.")


def _positive(cfg, keys: tuple[str, ...], group: str, *, strict: bool = True) -> None:
    for k in keys:
        v = getattr(cfg, k)
        if (v <= 0) if strict else (v < 0):
            raise ConfigError(f"{group}.{k} must be {'> 0' if strict else '>= 0'}, got {v}")


TOY_GROUPS = {"optim": ("tiny",), "data": ("toy_",), "eval": ("toy_",)}


def _hydra_choices() -> dict:
    try:
        from hydra.core.hydra_config import HydraConfig

        return dict(HydraConfig.get().runtime.choices) if HydraConfig.initialized() else {}
    except Exception:  # composed without a Hydra run (tests, compose API)
        return {}


def check_real_model_settings(cfg, choices: dict | None = None) -> None:
    """A real model (anything but the built-in tiny one) never runs with the toy's settings: a toy evaluation set or
    toy data (``toy:`` paths), or a toy config group (optim=tiny, data=toy_*, eval=toy_*) chosen by
    default. Refused here, before the model loads, naming what to use instead."""
    from eval_hooks.model_source import is_toy_model

    if is_toy_model(cfg.model.path):
        return
    from omegaconf import OmegaConf

    found = []
    ev_path = OmegaConf.select(cfg, "eval.path", default=None, throw_on_missing=False)
    ev_on = bool(OmegaConf.select(cfg, "eval.enabled", default=False))
    if ev_on and str(ev_path or "").startswith("toy:"):
        found.append(f"eval.path={ev_path} (a toy evaluation set)")

    for key in ("data.train_path", "items_path"):
        v = OmegaConf.select(cfg, key, default=None, throw_on_missing=False)
        if isinstance(v, str) and v.startswith("toy:"):
            found.append(f"{key}={v} (toy data)")
    choices = _hydra_choices() if choices is None else choices
    for group, prefixes in TOY_GROUPS.items():
        c = choices.get(group)
        if c and c.startswith(prefixes) and not any(f.startswith(group) for f in found) and (ev_on or group != "eval"):
            found.append(f"{group}={c} (the toy's settings)")
    if found:
        raise ConfigError(f"model.path={cfg.model.path} is a real model but the run has the toy model's settings: "
                          f"{'; '.join(found)}. Use a matching recipe (e.g. recipe=scope_smollm2_135m) or set them: "
                          f"eval=facts eval.path=<facts_heldout.jsonl>, data=facts_pairs, optim=small_real")


def validate_common(cfg) -> None:
    from eval_hooks.models import check_model_path

    check_known_keys(cfg)
    check_model_path(cfg.model.path, "model.path")
    check_real_model_settings(cfg)
    _validate_init_adapter(cfg)
    if cfg.model.logprob_chunk < 0:
        raise ConfigError(f"model.logprob_chunk must be >= 0 (0 = full logits), got {cfg.model.logprob_chunk}")
    if hasattr(cfg, "optim"):
        for k in ("batch_size", "grad_accum"):
            if getattr(cfg.optim, k) < 1:
                raise ConfigError(f"optim.{k} must be >= 1, got {getattr(cfg.optim, k)}")
        if not 0 <= cfg.optim.warmup_ratio < 1:
            raise ConfigError(f"optim.warmup_ratio must be in [0, 1), got {cfg.optim.warmup_ratio}")
        _positive(cfg.optim, ("lr", "eps"), "optim")
        _positive(cfg.optim, ("weight_decay",), "optim", strict=False)
    if hasattr(cfg, "trainer"):
        t = cfg.trainer
        if t.max_steps < 1:
            raise ConfigError(f"trainer.max_steps must be >= 1, got {t.max_steps}")
        if t.keep_last < 1:
            raise ConfigError(f"trainer.keep_last must be >= 1, got {t.keep_last}")
        _positive(t, ("log_every",), "trainer")
        _positive(t, ("spike_warmup_steps",), "trainer", strict=False)
        if not 0 <= t.spike_ema_decay < 1:
            raise ConfigError(f"trainer.spike_ema_decay must be in [0, 1), got {t.spike_ema_decay}")
        _positive(t, ("save_every",), "trainer", strict=False)
        if t.resume not in ("auto", "none"):
            from pathlib import Path

            if t.overwrite:
                raise ConfigError(f"trainer.overwrite=true starts a fresh run; it cannot resume trainer.resume={t.resume!r}")

            if not Path(t.resume).expanduser().exists():
                raise ConfigError(f"trainer.resume={t.resume!r}: no such checkpoint path (auto | none | <checkpoint dir>)")
    if hasattr(cfg, "generation"):
        _positive(cfg.generation, ("batch_size", "sync_every", "timeout_s"), "generation")
    if hasattr(cfg, "logger"):
        import importlib.util

        if cfg.logger.kind == "wandb" and importlib.util.find_spec("wandb") is None:
            raise ConfigError("logger=wandb needs the wandb package: install the extra (pip install -e '.[wandb]', "
                              "or pip install wandb), or use logger=jsonl")
    if hasattr(cfg, "eval"):
        if cfg.eval.max_prompt_tokens < 1:
            raise ConfigError(f"eval.max_prompt_tokens must be >= 1, got {cfg.eval.max_prompt_tokens}")
        _positive(cfg.eval, ("max_new_tokens",), "eval")


def _validate_init_adapter(cfg) -> None:
    m = cfg.model
    if m.init_adapter is None:
        return
    check_adapter_dir(m.init_adapter)
    if m.init_adapter_mode == "continue" and not m.lora.enabled:
        raise ConfigError("model.init_adapter_mode=continue trains the loaded adapter: it needs model.lora.enabled=true "
                          "(use init_adapter_mode=merge for full fine-tuning from an adapter)")
    if hasattr(cfg, "generation") and cfg.generation.backend == "vllm_server" and m.init_adapter_mode == "merge":
        raise ConfigError("generation=vllm_server with model.init_adapter_mode=merge: the server would sample from the "
                          "bare base plus the new adapter. Serve a merged model (python recipes/merge.py) as model.path, "
                          "or use model.init_adapter_mode=continue")


def validate_merge(cfg) -> None:
    validate_common(cfg)
    if not cfg.adapters:
        raise ConfigError("adapters: give at least one adapter directory to merge, e.g. adapters=[runs/x/final]")
    for i, adapter in enumerate(cfg.adapters):
        check_adapter_dir(adapter, f"adapters[{i}]")
    if Path(cfg.out_dir).expanduser().exists():
        raise ConfigError(f"out_dir={cfg.out_dir!r} exists; merge writes a new directory")


def validate_dpo(cfg) -> None:
    validate_common(cfg)
    a = cfg.algo
    for k in ("lambda_m", "lambda_c", "lambda_p", "rho"):
        v = getattr(a, k)
        if not 0.0 <= v <= 1.0:
            raise ConfigError(f"algo.{k}={v} must be in [0, 1]")
    total = a.lambda_m + a.lambda_c + a.lambda_p
    if abs(total - 1.0) > 1e-6:
        raise ConfigError(f"algo.lambda_m + algo.lambda_c + algo.lambda_p must sum to 1, got "
                          f"{a.lambda_m} + {a.lambda_c} + {a.lambda_p} = {total:g}")
    if a.beta <= 0:
        raise ConfigError(f"algo.beta must be > 0, got {a.beta}")
    if not 0 <= a.label_smoothing < 0.5:
        raise ConfigError(f"algo.label_smoothing must be in [0, 0.5), got {a.label_smoothing}")
    if not 0.0 <= a.lambda_u <= 1.0:
        raise ConfigError(f"algo.lambda_u={a.lambda_u} must be in [0, 1]")
    if a.unknown_irrelevant and a.lambda_u == 0:
        raise ConfigError("algo.unknown_irrelevant=true draws from the unknown pools, which have no mass at algo.lambda_u=0")


def validate_knowledge(kcfg) -> None:
    """The ``knowledge`` group of recipes/mine_pairs.py and recipes/evaluate.py (checked before any model loads)."""
    if not kcfg.enabled:
        return
    if kcfg.k < 1:
        raise ConfigError(f"knowledge.k must be >= 1, got {kcfg.k}")
    if kcfg.k > 1 and kcfg.temperature <= 0:
        raise ConfigError(f"knowledge.temperature must be > 0 with knowledge.k={kcfg.k} (k=1 is greedy)")
    for key in ("known_threshold", "unknown_threshold", "stable_threshold"):
        if not 0.0 <= kcfg[key] <= 1.0:
            raise ConfigError(f"knowledge.{key}={kcfg[key]} must be in [0, 1]")
    if not kcfg.unknown_threshold < kcfg.known_threshold:
        raise ConfigError(f"knowledge.unknown_threshold ({kcfg.unknown_threshold}) must be below "
                          f"knowledge.known_threshold ({kcfg.known_threshold})")
    if kcfg.unknown_irrelevant and not kcfg.stable_threshold > kcfg.unknown_threshold:
        raise ConfigError(f"knowledge.stable_threshold ({kcfg.stable_threshold}) must exceed knowledge.unknown_threshold "
                          f"({kcfg.unknown_threshold}) so that a stable unknown item's modal answer is a wrong one")


def validate_sft(cfg) -> None:
    validate_common(cfg)


def validate_grpo(cfg, world: int | None = None) -> None:
    """GRPO settings; with ``world`` (the number of processes) also the batch geometry."""
    validate_common(cfg)
    a = cfg.algo
    if a.group_size < 2:
        raise ConfigError(f"algo.group_size must be >= 2 for group-relative advantages, got {a.group_size}")
    if a.prompts_per_step < 1:
        raise ConfigError(f"algo.prompts_per_step must be >= 1, got {a.prompts_per_step}")
    if not (0 <= a.eps_low < 1 and a.eps_high >= 0):
        raise ConfigError(f"algo.eps_low must be in [0,1) and algo.eps_high >= 0, got {a.eps_low}, {a.eps_high}")
    if a.num_iterations < 1:
        raise ConfigError(f"algo.num_iterations must be >= 1, got {a.num_iterations}")
    if a.temperature < 0 or not 0 < a.top_p <= 1 or a.reward_timeout_s < 0:
        raise ConfigError(f"need algo.temperature >= 0, 0 < algo.top_p <= 1 and algo.reward_timeout_s >= 0; got "
                          f"{a.temperature}, {a.top_p}, {a.reward_timeout_s}")
    if a.max_new_tokens < 1 or a.max_refill_rounds < 0 or a.env_max_turns < 1:
        raise ConfigError(f"algo.max_new_tokens and algo.env_max_turns must be >= 1 and algo.max_refill_rounds >= 0; "
                          f"got {a.max_new_tokens}, {a.env_max_turns}, {a.max_refill_rounds}")
    if a.env is not None and a.is_correction != "none":
        raise ConfigError("algo.is_correction needs per-token rollout log-probs, which environment rollouts "
                          "(algo.env) do not keep; use algo.is_correction=none")
    if cfg.generation.backend == "vllm_server" and not cfg.model.lora.enabled:
        raise ConfigError("generation=vllm_server needs model.lora.enabled=true: only a LoRA adapter can be synced to "
                          "the running server; with full fine-tuning it would keep sampling from its base weights")
    if world is not None:
        check_grpo_geometry(cfg, world)


def check_grpo_geometry(cfg, world: int) -> None:
    """Raises when the global rollout batch does not split into the configured micro-batches."""
    a, o = cfg.algo, cfg.optim
    samples = a.prompts_per_step * a.group_size
    if a.prompts_per_step % world or o.batch_size * o.grad_accum * world != samples:
        raise ConfigError(
            f"algo.prompts_per_step * algo.group_size = {a.prompts_per_step} * {a.group_size} = {samples} samples per "
            f"step must equal optim.batch_size * optim.grad_accum * world = {o.batch_size} * {o.grad_accum} * {world} "
            f"(and prompts_per_step must divide by world); e.g. optim.batch_size={samples // (o.grad_accum * world) or 1}")


def check_adapter_dir(path: str, field: str = "model.init_adapter") -> Path:
    """A PEFT adapter directory with safetensors weights (never a pickled ``adapter_model.bin``)."""
    d = Path(path).expanduser()
    if not d.is_dir():
        raise ConfigError(f"{field}={path!r}: no such directory")
    if not (d / "adapter_config.json").is_file():
        hint = " (it holds a full model: use it as model.path)" if (d / "config.json").is_file() else ""
        raise ConfigError(f"{field}={path!r}: not a PEFT adapter directory, {d / 'adapter_config.json'} is missing{hint}")
    if not (d / "adapter_model.safetensors").is_file():
        raise ConfigError(f"{field}={path!r}: {d / 'adapter_model.safetensors'} is missing (only safetensors "
                          f"adapters are loaded, never pickled adapter_model.bin)")
    return d.resolve()


def validate_distill(cfg) -> None:
    validate_common(cfg)
    a, d = cfg.algo, cfg.data
    if a.topk < 1 or a.max_reasoning_tokens < 1 or a.min_reasoning_tokens < 0:
        raise ConfigError(f"algo.topk and algo.max_reasoning_tokens must be >= 1 and algo.min_reasoning_tokens >= 0; "
                          f"got {a.topk}, {a.max_reasoning_tokens}, {a.min_reasoning_tokens}")
    for k in ("kl_temperature", "teacher_temperature", "calibration_temperature"):
        if getattr(a, k) <= 0:
            raise ConfigError(f"algo.{k} must be > 0, got {getattr(a, k)}")
    if a.token_kl_weight < 0 or a.choice_kl_weight < 0:
        raise ConfigError(f"algo.token_kl_weight and algo.choice_kl_weight must be >= 0")
    if len(a.choice_tokens) != 2:
        raise ConfigError(f"algo.choice_tokens must name exactly two strings (A, B), got {list(a.choice_tokens)}")
    if a.teacher_cache and (a.topk_support != "teacher" or a.teacher != "initial" or a.mode != "teacher_tokens"):
        raise ConfigError("algo.teacher_cache=true needs algo.topk_support=teacher, algo.teacher=initial and "
                          f"algo.mode=teacher_tokens (got {a.topk_support}, {a.teacher}, {a.mode})")
    if a.teacher == "initial" and not cfg.model.lora.enabled:
        raise ConfigError("algo.teacher=initial is the adapter-disabled model: it needs model.lora.enabled=true")
    if d.source == "files" and not d.train_path:
        raise ConfigError("data.train_path: give the taste fork items to train on (or data.source=toy)")
    if d.prompt_style == "mist" or d.source == "mist":
        _validate_mist_views(cfg)


def _validate_mist_views(cfg) -> None:
    """data.prompt_style=mist (OPSD on MIST): on-policy token KL only; MIST items have no A/B choice position."""
    a, d = cfg.algo, cfg.data
    where = "data.prompt_style=mist (student: the misleading MIST prompt, teacher: the clean one)"
    if d.prompt_style != "mist":
        raise ConfigError(f"data.source=mist trains on MIST views: it needs data.prompt_style=mist, got {d.prompt_style}")
    if a.mode != "on_policy":
        raise ConfigError(f"{where}: the student writes the tokens; set algo.mode=on_policy (got {a.mode})")
    if a.stage != "kl":
        raise ConfigError(f"{where}: only algo.stage=kl; calibration reads an A/B choice position MIST has not")
    if a.choice_kl_weight != 0:
        raise ConfigError(f"{where}: MIST items have no A/B choice position, so there is no choice KL; set "
                          f"algo.choice_kl_weight=0 (got {a.choice_kl_weight})")
    if d.eval_path:
        raise ConfigError(f"{where}: data.eval_path (the epoch-end taste evaluation) must be null; MIST is evaluated "
                          f"by recipes/evaluate.py (data.source=mist does it after training)")
    if d.source == "mist" and not d.train_path:
        raise ConfigError("data.source=mist: data.train_path must name the MIST training items")
    if d.source == "mist" and not cfg.pipeline.eval_sets:
        raise ConfigError("data.source=mist: pipeline.eval_sets must name at least one MIST item file to evaluate")
