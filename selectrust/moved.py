"""Old import paths name their new home: the modules the fourth cut moved (README "Moved in this release") fail with
a ``ModuleNotFoundError`` that says where each went, not a bare "No module named ...". No alias is kept (the old
path still fails, so nothing runs on a stale import), and nothing is imported to say it.

A finder at the end of ``sys.meta_path`` (:func:`install`, called by ``selectrust``, ``eval_hooks`` and ``trainer``
on import): it is asked only once every other finder found nothing, and answers only for the names in
:data:`MOVED` (and the modules under them)."""

from __future__ import annotations

import sys

#: old module -> where it went (a module, or a sentence when it was split)
MOVED = {
    "eval_hooks.core": "selectrust.core",
    "eval_hooks.model": "selectrust.model",
    "eval_hooks.generation": "selectrust.generation",
    "eval_hooks.vocab": "selectrust.conditions",
    "eval_hooks.report_kit": "eval_hooks.scoring.report_kit",
    "eval_hooks.builders.med_grammar": "eval_hooks.families.med.grammar",
    "eval_hooks.builders.med_terms": "eval_hooks.families.med.terms",
    "eval_hooks.builders.med_verify": "eval_hooks.families.med.verify",
    "eval_hooks.families.taste.answers": "eval_hooks.parsers",
    "eval_hooks.families.med.labels": "eval_hooks.parsers",
    "selectrust.generation.backends.registry": "selectrust.generation.backends",
    "trainer.data.sources": "selectrust.core.data_sources",
    "trainer.dpo_losses": "trainer.dpo.losses",
    "trainer.model.pairs": "trainer.dpo.pairs",
    "trainer.config.registry": "trainer.config.roots (SCHEMAS) and trainer.config.composition",
    "trainer.rl.registry": "trainer.rl.callables",
    # the fifth cut (issue 58): README, "Moved in the fifth cut"
    "trainer.core": "trainer.runtime",
    "trainer.core.stages": "recipes.stages (Stage: trainer.runtime.stage)",
    "trainer.core.stage_record": "recipes.stages.record",
    "trainer.core.stage_start": "recipes.stages.start",
    "trainer.model": "trainer.logprobs (its pairs: trainer.dpo.pairs)",
    "trainer.evaluation": "trainer.eval_bridge",
    "trainer.data.sft_data": "trainer.sft.data",
    "trainer.distill.pipeline": "recipes.pipelines.taste_distill",
    "trainer.distill.opsd_pipeline": "recipes.pipelines.opsd",
}


def moved_home(fullname: str) -> tuple[str, str] | None:
    """``(old module, new home)`` when ``fullname`` is a moved module or a module under one; None otherwise."""
    parts = fullname.split(".")
    for n in range(len(parts), 0, -1):
        old = ".".join(parts[:n])
        if old in MOVED:
            return old, MOVED[old]
    return None


class MovedModuleFinder:
    """The meta-path finder (module docstring)."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        found = moved_home(fullname)
        if found is None:
            return None
        old, new = found
        raise ModuleNotFoundError(f"No module named {fullname!r}: {old} moved to {new} (README, \"Moved in this "
                                  f"release\"); update the import (a plugin: its entry point too)", name=fullname)

    @classmethod
    def invalidate_caches(cls) -> None:
        pass


def install() -> None:
    """Put :class:`MovedModuleFinder` last on ``sys.meta_path`` (once)."""
    if MovedModuleFinder not in sys.meta_path:
        sys.meta_path.append(MovedModuleFinder)
