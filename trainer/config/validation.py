"""Semantic validation of a composed config (λ sum to one, paths exist, ...): ``validate_<recipe>`` runs
right after composition, before any model loads, and raises :class:`ConfigError` naming the key."""

from __future__ import annotations

import math

from dataclasses import fields, is_dataclass
from pathlib import Path

from selectrust.conditions import SCOPE_LAMBDAS
from selectrust.core.errors import ConfigError
from selectrust.generation.backends import backends_that, capabilities, check_settings, get_backend
from omegaconf import DictConfig, OmegaConf
from omegaconf import DictConfig, ListConfig
from selectrust.model import is_toy_model
from omegaconf import OmegaConf
from selectrust.model import check_model_path
from eval_hooks.families import family_settings, get_family
from eval_hooks.families import get_family
from selectrust.model import AdapterError, check_adapter
from trainer.rl.oversample import MAX_OVERSAMPLE_CAP, MAX_ROUND_COMPLETIONS, round_completions
from trainer.algos.choices import PAIRED_COMPLETIONS, PAIRED_ROWS
from selectrust.model import AdapterError, check_adapter_dir as check


# ---------------------------------------------------------------------------------------------
# Semantic validation (runs before any model loads)
# ---------------------------------------------------------------------------------------------
def check_known_keys(cfg, prefix: str = "") -> None:
    """Refuse keys the typed schema does not know, also ones added with Hydra's ``+key=value`` (which
    bypasses the schema's struct check): they would be accepted and silently ignored."""
    schema = OmegaConf.get_type(cfg)
    if not is_dataclass(schema):
        return
    from trainer.config.suggest import did_you_mean  # deferred: import cycle with trainer.config.suggest

    known = {f.name for f in fields(schema)}
    for key in cfg.keys():
        if key not in known:
            hint = did_you_mean(str(key), known).replace("'", f"'{prefix}", 1)
            raise ConfigError(f"unknown config key '{prefix}{key}'{hint} (not in {schema.__name__}; a leading '+' "
                              f"does not make it known); known keys here: {', '.join(sorted(known))}")
        node = cfg._get_node(key)
        if isinstance(node, DictConfig) and not node._is_missing() and not node._is_none():
            check_known_keys(node, f"{prefix}{key}.")


def check_finite_numbers(cfg, prefix: str = "") -> None:
    """Refuse a float that is nan or ±inf anywhere in ``cfg`` (every group, lists such as ``optim.betas`` too),
    naming its key: no setting of this project means anything at nan or inf (0 is how a limit is turned off), and
    ``optim.lr=nan`` would otherwise fail inside the optimizer, ``inf`` only after steps were skipped."""
    keys = cfg.keys() if isinstance(cfg, DictConfig) else range(len(cfg))
    for key in keys:
        name = f"{prefix}{key}" if isinstance(cfg, DictConfig) else f"{prefix.rstrip('.')}[{key}]"
        node = cfg._get_node(key)
        if node is None or node._is_missing() or node._is_none():  # an unset key is reported where it is needed
            continue
        if isinstance(node, (DictConfig, ListConfig)):
            check_finite_numbers(node, name + ".")
        elif isinstance(node._value(), float) and not math.isfinite(node._value()):
            raise ConfigError(f"{name} must be a finite number, got {node._value()}")


def _positive(cfg, keys: tuple[str, ...], group: str, *, strict: bool = True) -> None:
    for k in keys:
        v = getattr(cfg, k)
        if (v <= 0) if strict else (v < 0):
            raise ConfigError(f"{group}.{k} must be {'> 0' if strict else '>= 0'}, got {v}")


TOY_GROUPS = {"optim": ("tiny",), "data": ("toy_",), "eval": ("toy_",)}


def _hydra_choices() -> dict:
    """The config groups Hydra chose for this run (``{}`` when composed without a Hydra run: tests, compose API)."""
    from hydra.core.hydra_config import HydraConfig  # deferred: imports hydra

    return dict(HydraConfig.get().runtime.choices) if HydraConfig.initialized() else {}


def check_real_model_settings(cfg, choices: dict | None = None) -> None:
    """A real model (anything but the built-in tiny one) never runs with the toy's settings: a toy evaluation set or
    toy data (``toy:`` paths), or a toy config group (optim=tiny, data=toy_*, eval=toy_*) chosen by
    default. Refused here, before the model loads, naming what to use instead."""
    if is_toy_model(cfg.model.path):
        return

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


#: The generation budgets distillation checks (``validate_distill``, ``recipes/advise.py``): its reasoning alone; its
#: held-out evaluation is logit-based, so ``eval.max_new_tokens`` budgets nothing it generates.
DISTILL_BUDGET_KEYS = ("algo.max_reasoning_tokens",)


def validate_common(cfg, *, budget_keys: tuple[str, ...] | None = None) -> None:
    """The checks every recipe's config gets. ``budget_keys``: the generation budgets the recipe generates with,
    checked against the model (:func:`check_generation_budget`; default: every key of
    ``trainer.config.budget.BUDGET_KEYS`` the config has)."""
    check_known_keys(cfg)
    check_finite_numbers(cfg)
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
        _positive(t, ("dist_timeout_s",), "trainer")
        if t.resume not in ("auto", "none"):
            from pathlib import Path

            if t.overwrite:
                raise ConfigError(f"trainer.overwrite=true starts a fresh run; it cannot resume trainer.resume={t.resume!r}")

            if not Path(t.resume).expanduser().exists():
                raise ConfigError(f"trainer.resume={t.resume!r}: no such checkpoint path (auto | none | <checkpoint dir>)")
    if hasattr(cfg, "generation"):
        _validate_generation(cfg)
    if hasattr(cfg, "logger"):
        import importlib.util

        if cfg.logger.kind == "wandb" and importlib.util.find_spec("wandb") is None:
            raise ConfigError("logger=wandb needs the wandb package: install the extra (pip install -e '.[wandb]', "
                              "or pip install wandb), or use logger=jsonl")
    if hasattr(cfg, "eval"):
        if cfg.eval.max_new_tokens is not None:  # None = the family's default budget for the rows
            _positive(cfg.eval, ("max_new_tokens",), "eval")
        check_family_settings(cfg.eval)
    if hasattr(cfg, "model"):
        # the model's positions, read without loading it (a longest prompt: later)
        check_generation_budget(cfg, keys=budget_keys)


def check_generation_budget(cfg, shape=None, prompt_tokens: int = 0, *, keys: tuple[str, ...] | None = None,
                            prompt_what: str = "") -> None:
    """Every generation budget key (``algo.max_new_tokens``, ``eval.max_new_tokens``) at most the model's positions
    minus ``prompt_tokens`` (the longest prompt), and a generation batch's memory within what the machine has
    (:mod:`trainer.config.budget`). ``shape``: the model's (default: read from ``model.path`` without loading it)."""
    from trainer.config.budget import (  # deferred: import cycle with trainer.config.budget
        BUDGET_KEYS, check_generation, model_shape)

    shape = model_shape(cfg.model.path) if shape is None else shape
    problem = check_generation(cfg, shape, prompt_tokens, keys=keys or BUDGET_KEYS, prompt_what=prompt_what)
    if problem is not None:
        raise ConfigError(problem)


def check_family_settings(eval_cfg) -> None:
    """Every family's own checks of its settings (``Family.check_settings``; their keys are in every config,
    whichever family is evaluated), as a ConfigError."""
    for name, settings in family_settings(eval_cfg).items():
        try:
            get_family(name).check_settings(settings)
        except ValueError as e:
            raise ConfigError(str(e)) from None


def backend_needs(cfg) -> dict[str, tuple[str, str]]:
    """What the evaluated family's run needs from the generation backend (``Family.backend_needs``: capability
    -> (what needs it, the setting that turns it off)); nothing for an entry point without an ``eval`` group."""
    if not hasattr(cfg, "eval"):
        return {}
    family = get_family(cfg.eval.family)
    return family.backend_needs(family.settings_from(cfg.eval))


def _validate_init_adapter(cfg) -> None:
    m = cfg.model
    if m.init_adapter is None:
        return
    check_adapter_dir(m.init_adapter)
    if m.init_adapter_mode == "continue" and not m.lora.enabled:
        raise ConfigError("model.init_adapter_mode=continue trains the loaded adapter: it needs model.lora.enabled=true "
                          "(use init_adapter_mode=merge for full fine-tuning from an adapter)")
    if hasattr(cfg, "generation") and _generation_capabilities(cfg).weight_sync and m.init_adapter_mode == "merge":
        raise ConfigError(f"generation={cfg.generation.backend} with model.init_adapter_mode=merge: the server would "
                          "sample from the bare base plus the new adapter. Serve a merged model (python "
                          "recipes/merge.py) as model.path, or use model.init_adapter_mode=continue")
    check_adapter_weights(m.init_adapter, m, "model.init_adapter")


def check_adapter_weights(path: str, model_cfg, field: str) -> None:
    """Finite values and shapes that fit ``model_cfg.path`` (``selectrust/model/adapter.py``), as a ConfigError."""
    try:
        check_adapter(path, model_cfg, field)
    except AdapterError as e:
        raise ConfigError(str(e)) from None


def _generation_capabilities(cfg):
    return capabilities(cfg.generation.backend, cfg.generation)


def _validate_generation(cfg) -> None:
    """The ``generation`` group: its node is the chosen backend's schema, the backend's own checks of its settings,
    and what the run asks of the backend (asked of its capabilities), checked before anything runs."""
    from trainer.config.schemas import (  # deferred: import cycle with trainer.config.schemas
        GenerationConfig, generation_schema)

    g = cfg.generation
    node = OmegaConf.get_type(g)
    if isinstance(node, type) and issubclass(node, GenerationConfig) and node not in (GenerationConfig,
                                                                                      generation_schema(g.backend)):
        raise ConfigError(f"generation.backend={g.backend} but the generation group holds the keys of another backend "
                          f"({node.__name__}): choose the backend with generation={g.backend} (conf/generation/)")
    spec = get_backend(g.backend)
    try:
        check_settings(spec, spec.settings_from(g), "generation")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    caps = spec.capabilities_for(g)
    if cfg.get("adapter_path") and not (caps.in_process or caps.loads_adapters):
        own = " evaluates a model of its own, not model.path:" if not caps.policy_model else ""
        raise ConfigError(f"generation={g.backend}{own} adapter_path cannot be applied to it (it loads no adapters; "
                          f"serve the adapter, or use {backends_that('in_process', 'loads_adapters', generation=g)})")
    if not caps.label_scores and "label_scores" in (needs := backend_needs(cfg)):
        what, off = needs["label_scores"]
        raise ConfigError(f"generation={g.backend} cannot score {what} (this backend scores no labels, or first tokens "
                          f"only): set {off}, or use {backends_that('label_scores', generation=g)}")


def validate_merge(cfg) -> None:
    validate_common(cfg)
    if not cfg.adapters:
        raise ConfigError("adapters: give at least one adapter directory to merge, e.g. adapters=[runs/x/final]")
    for i, adapter in enumerate(cfg.adapters):
        check_adapter_dir(adapter, f"adapters[{i}]")
        check_adapter_weights(adapter, cfg.model, f"adapters[{i}]")
    if Path(cfg.out_dir).expanduser().exists():
        raise ConfigError(f"out_dir={cfg.out_dir!r} exists; merge writes a new directory")


def validate_dpo(cfg) -> None:
    validate_common(cfg)
    a = cfg.algo
    for k in (*SCOPE_LAMBDAS, "rho"):
        v = getattr(a, k)
        if not 0.0 <= v <= 1.0:
            raise ConfigError(f"algo.{k}={v} must be in [0, 1]")
    total = sum(getattr(a, k) for k in SCOPE_LAMBDAS)
    if abs(total - 1.0) > 1e-6:
        raise ConfigError(" + ".join(f"algo.{k}" for k in SCOPE_LAMBDAS) + " must sum to 1, got "
                          + " + ".join(f"{getattr(a, k)}" for k in SCOPE_LAMBDAS) + f" = {total:g}")
    if a.beta <= 0:
        raise ConfigError(f"algo.beta must be > 0, got {a.beta}")
    if not 0 <= a.label_smoothing < 0.5:
        raise ConfigError(f"algo.label_smoothing must be in [0, 0.5), got {a.label_smoothing}")
    if not (a.simpo_gamma >= 0 and math.isfinite(a.simpo_gamma)):
        raise ConfigError(f"algo.simpo_gamma must be a finite number >= 0, got {a.simpo_gamma}")
    if not (a.rpo_alpha >= 0 and math.isfinite(a.rpo_alpha)):
        raise ConfigError(f"algo.rpo_alpha must be a finite number >= 0, got {a.rpo_alpha}")
    if a.rpo_alpha and a.sft_on_chosen:
        raise ConfigError("algo.rpo_alpha adds an NLL term to the DPO loss; algo.sft_on_chosen has no DPO loss")
    if not 0.0 <= a.lambda_u <= 1.0:
        raise ConfigError(f"algo.lambda_u={a.lambda_u} must be in [0, 1]")
    if a.unknown_irrelevant and a.lambda_u == 0:
        raise ConfigError("algo.unknown_irrelevant=true draws from the unknown pools, which have no mass at algo.lambda_u=0")


def validate_knowledge(kcfg, generation=None) -> None:
    """The ``knowledge`` group of recipes/mine_pairs.py and recipes/evaluate.py (checked before any model loads);
    ``generation``: the run's ``generation`` group (asked whether its backend returns token log-probs)."""
    if not kcfg.enabled:
        return
    if kcfg.k < 1:
        raise ConfigError(f"knowledge.k must be >= 1, got {kcfg.k}")
    if kcfg.k > 1 and kcfg.temperature <= 0:
        raise ConfigError(f"knowledge.temperature must be > 0 with knowledge.k={kcfg.k} (k=1 is greedy)")
    for key in ("known_threshold", "unknown_threshold", "stable_threshold"):
        if not 0.0 <= getattr(kcfg, key) <= 1.0:
            raise ConfigError(f"knowledge.{key}={getattr(kcfg, key)} must be in [0, 1]")
    if not kcfg.unknown_threshold < kcfg.known_threshold:
        raise ConfigError(f"knowledge.unknown_threshold ({kcfg.unknown_threshold}) must be below "
                          f"knowledge.known_threshold ({kcfg.known_threshold})")
    if kcfg.score != "accuracy":  # greedy_prob, combined: scored by the greedy answer's probability
        if kcfg.score == "combined" and kcfg.k < 2:
            raise ConfigError(f"knowledge.score=combined averages greedy_prob with the accuracy of k >= 2 samples; "
                              f"got knowledge.k={kcfg.k}")
        if not kcfg.unknown_threshold < 0.5 < kcfg.known_threshold:
            raise ConfigError(f"knowledge.score={kcfg.score}: a right greedy answer weighs toward known, a wrong one "
                              f"toward unknown; it needs knowledge.unknown_threshold < 0.5 < "
                              f"knowledge.known_threshold, got {kcfg.unknown_threshold} and {kcfg.known_threshold}")
        if generation is not None:
            from selectrust.generation.backends import capabilities

            if not capabilities(generation.backend, generation).sampled_token_ids:
                raise ConfigError(f"knowledge.score={kcfg.score} needs the greedy answer's token log-probs, which "
                                  f"generation={generation.backend} does not return (use {backends_that('sampled_token_ids')}"
                                  f", or knowledge.score=accuracy)")
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
    if a.max_new_tokens < 1 or a.max_refill_rounds < 0 or (a.env_max_turns is not None and a.env_max_turns < 1):
        raise ConfigError(f"algo.max_new_tokens and algo.env_max_turns must be >= 1 and algo.max_refill_rounds >= 0; "
                          f"got {a.max_new_tokens}, {a.env_max_turns}, {a.max_refill_rounds}")
    if not 0.0 <= a.zero_variance_skip <= 1.0:
        raise ConfigError(f"algo.zero_variance_skip is a probability in [0, 1] (0 = off), got {a.zero_variance_skip}")
    _validate_round_size(a)
    if a.env is not None and a.is_correction != "none":
        raise ConfigError("algo.is_correction needs per-token rollout log-probs, which environment rollouts "
                          "(algo.env) do not keep; use algo.is_correction=none")
    if a.env is not None and a.rollout_mode != "single_turn":
        raise ConfigError(f"algo.rollout_mode={a.rollout_mode} samples single-turn prompt rows with and without their "
                          f"context; algo.env={a.env!r} runs episodes: set algo.rollout_mode=single_turn or algo.env=null")
    _validate_sft_term(cfg)
    _validate_rollout_backend(cfg)
    if world is not None:
        check_grpo_geometry(cfg, world)


def _validate_round_size(a) -> None:
    """``algo.oversample_cap`` in [1, MAX_OVERSAMPLE_CAP] and a round of at most MAX_ROUND_COMPLETIONS completions
    (trainer/rl/oversample.py): an unbounded cap lets one round ask for more prompts than memory holds."""
    if a.oversample_cap < 1:
        raise ConfigError(f"algo.oversample_cap must be >= 1 (the first round draws at most oversample_cap x "
                          f"prompts_per_step prompts; 1 = no over-sampling), got {a.oversample_cap}")
    if a.oversample_cap > MAX_OVERSAMPLE_CAP:
        raise ConfigError(f"algo.oversample_cap must be <= {MAX_OVERSAMPLE_CAP:g} (a round's draw grows without end "
                          f"as the zero-variance rate nears 1; use algo.zero_variance_skip to pass such prompts "
                          f"over), got {a.oversample_cap}")
    completions = _per_sample(a)[0]
    n = round_completions(a.oversample_cap, a.prompts_per_step, a.group_size) * completions
    if n > MAX_ROUND_COMPLETIONS:
        raise ConfigError(f"a GRPO round would generate {n} completions (floor(algo.oversample_cap={a.oversample_cap:g} "
                          f"x algo.prompts_per_step={a.prompts_per_step}) x algo.group_size={a.group_size}"
                          f"{f' x {completions} (algo.rollout_mode={a.rollout_mode})' if completions > 1 else ''}), over "
                          f"the limit of {MAX_ROUND_COMPLETIONS} a round holds in memory; lower one of them")


def _per_sample(a) -> tuple[int, int]:
    """(completions generated, rows trained) per sample of ``algo.group_size`` under ``algo.rollout_mode``:
    paired_context generates one with the context and one without, and trains 3 rows (trainer/rl/paired_rollouts.py)."""
    return (PAIRED_COMPLETIONS, PAIRED_ROWS) if a.rollout_mode == "paired_context" else (1, 1)


def _validate_sft_term(cfg) -> None:
    """GRPO's SFT term (``algo.sft_coef``, trainer/rl/sft_rows.py): a weight >= 0, single-turn prompts (their gold
    fills the target), and a step count for ``linear_decay``."""
    a = cfg.algo
    if a.sft_coef < 0:
        raise ConfigError(f"algo.sft_coef must be >= 0 (0 = no SFT term), got {a.sft_coef}")
    if a.sft_coef > 0 and a.env is not None:
        raise ConfigError(f"algo.sft_coef={a.sft_coef} needs single-turn prompt rows (their gold fills algo.sft_target); "
                          f"algo.env={a.env!r} runs episodes: set algo.sft_coef=0 or algo.env=null")
    if a.sft_coef > 0 and a.sft_schedule == "linear_decay" and not (cfg.trainer.max_steps or 0) >= 1:
        raise ConfigError(f"algo.sft_schedule=linear_decay decays over trainer.max_steps, which is "
                          f"{cfg.trainer.max_steps}; set trainer.max_steps >= 1 or algo.sft_schedule=constant")


def _validate_rollout_backend(cfg) -> None:
    """GRPO samples its rollouts from the policy being trained: the backend must return the sampled token ids and
    their log-probs, and generate in process or take the synced adapter."""
    name, caps = cfg.generation.backend, _generation_capabilities(cfg)
    if not caps.sampled_token_ids:
        raise ConfigError(f"generation={name} cannot run GRPO rollouts: they need the sampled token ids and their "
                          f"log-probs, which this backend does not return; use {backends_that('sampled_token_ids', generation=cfg.generation)}")
    if not (caps.in_process or caps.weight_sync):
        raise ConfigError(f"generation={name} cannot run GRPO rollouts: the policy's adapter cannot be synced to it, "
                          f"so it would not sample from the policy being trained; use "
                          f"{backends_that('in_process', 'weight_sync', generation=cfg.generation)}")
    if caps.weight_sync and not cfg.model.lora.enabled:
        raise ConfigError(f"generation={name} needs model.lora.enabled=true: only a LoRA adapter can be synced to "
                          "the running server; with full fine-tuning it would keep sampling from its base weights")


def check_grpo_geometry(cfg, world: int) -> None:
    """Raises when the global rollout batch does not split into the configured micro-batches."""
    a, o = cfg.algo, cfg.optim
    rows = _per_sample(a)[1]
    samples = a.prompts_per_step * a.group_size * rows
    if a.prompts_per_step % world or o.batch_size * o.grad_accum * world != samples:
        paired = f" * {rows} (algo.rollout_mode={a.rollout_mode}: rows per sample)" if rows > 1 else ""
        raise ConfigError(
            f"algo.prompts_per_step * algo.group_size{paired} = {a.prompts_per_step} * {a.group_size}"
            f"{f' * {rows}' if rows > 1 else ''} = {samples} samples per step must equal optim.batch_size * "
            f"optim.grad_accum * world = {o.batch_size} * {o.grad_accum} * {world} (and prompts_per_step must divide by "
            f"world); e.g. optim.batch_size={samples // (o.grad_accum * world) or 1}")


def check_adapter_dir(path: str, field: str = "model.init_adapter") -> Path:
    """A PEFT adapter directory with safetensors weights (``selectrust.model.adapter.check_adapter_dir``), as
    a ConfigError; returns the resolved directory."""
    try:
        return check(path, field)
    except AdapterError as e:
        raise ConfigError(str(e)) from None


def validate_distill(cfg) -> None:
    validate_common(cfg, budget_keys=DISTILL_BUDGET_KEYS)
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
    if d.source == "mist":
        raise ConfigError("data.source=mist: OPSD is a pipeline kind, not a data source; use pipeline.kind=opsd with "
                          "data.prompt_style=mist and the MIST items as data.train_path (e.g. recipe=opsd_tiny)")
    if d.prompt_style == "mist" or cfg.pipeline.kind == "opsd":
        _validate_mist_views(cfg)


def _validate_mist_views(cfg) -> None:
    """data.prompt_style=mist (OPSD on MIST): on-policy token KL only; MIST items have no A/B choice position."""
    a, d = cfg.algo, cfg.data
    where = "data.prompt_style=mist (student: the misleading MIST prompt, teacher: the clean one)"
    if d.prompt_style != "mist":
        raise ConfigError(f"pipeline.kind=opsd trains on MIST views: it needs data.prompt_style=mist, got {d.prompt_style}")
    if a.mode != "on_policy":
        raise ConfigError(f"{where}: the student writes the tokens; set algo.mode=on_policy (got {a.mode})")
    if a.stage != "kl":
        raise ConfigError(f"{where}: only algo.stage=kl; calibration reads an A/B choice position MIST has not")
    if a.choice_kl_weight != 0:
        raise ConfigError(f"{where}: MIST items have no A/B choice position, so there is no choice KL; set "
                          f"algo.choice_kl_weight=0 (got {a.choice_kl_weight})")
    if d.eval_path:
        raise ConfigError(f"{where}: data.eval_path (the epoch-end taste evaluation) must be null; MIST is evaluated "
                          f"by recipes/evaluate.py (pipeline.kind=opsd does it after training)")
    if cfg.pipeline.kind == "opsd" and not d.train_path:
        raise ConfigError("pipeline.kind=opsd: data.train_path must name the MIST training items")
    if cfg.pipeline.kind == "opsd" and not cfg.pipeline.eval_sets:
        raise ConfigError("pipeline.kind=opsd: pipeline.eval_sets must name at least one MIST item file to evaluate")
