"""Every registry of named components, by its entry-point group: ``(module, name)``. docs/architecture.md rule 14
lists the same groups. tests/repo/test_import_rules.py fails on a registry added without its line here (or a lookup
table that is no ``Registry``); tests/selectrust/core/test_plugin_errors.py walks each with broken plugins."""

REGISTRIES = {
    "selectrust.backends": ("selectrust.generation.backends", "BACKENDS"),
    "selectrust.families": ("eval_hooks.families", "FAMILIES"),
    "selectrust.answer_types": ("eval_hooks.parsers", "ANSWER_TYPES"),
    "selectrust.data_sources": ("selectrust.core.data_sources", "DATA_SOURCES"),
    "selectrust.dpo_losses": ("trainer.dpo.losses", "DPO_LOSSES"),
    "selectrust.environments": ("trainer.rl.envs", "ENVIRONMENTS"),
    "selectrust.rewards": ("trainer.rl.rewards", "REWARDS"),
    "selectrust.rollout_modes": ("trainer.rl.modes", "MODES"),
    "selectrust.schemas": ("trainer.config.roots", "SCHEMAS"),
    "selectrust.stage_recipes": ("recipes.stage_recipes", "STAGE_RECIPES"),
    "selectrust.distill_pipelines": ("recipes.pipelines", "PIPELINES"),
    "selectrust.tiny_presets": ("selectrust.model.load", "TINY_PRESETS"),
    "selectrust.gguf_packages": ("selectrust.model.source", "GGUF_PACKAGES"),
    "selectrust.demos": ("demos.config", "DEMOS"),
    "selectrust.demo_arms": ("demos.real.arms", "ARMS"),
}
