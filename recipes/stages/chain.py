"""A chain's stages (``recipes/chain.py``; ``conf/recipe/<chain>.yaml``'s ``stages``) as :class:`Stage` s: each a
trainer recipe started from the stage before it (``init_from``), checked before any model loads."""

from __future__ import annotations

from selectrust.core.errors import ConfigError
from trainer.runtime.stage import STAGE_NAME, Stage


def stage_sources(stages, recipes) -> dict[str, str | None]:
    """``{stage: the stage it starts from, or None}`` of a chain's ``stages`` (``StageConfig`` by name), each a
    recipe of ``recipes``; raises ConfigError on a bad chain (before any model loads)."""
    if not stages:
        raise ConfigError("stages: the chain names no stage (pick a chain recipe, e.g. recipe=box2_tiny)")
    out: dict[str, str | None] = {}
    previous = None
    for name, st in stages.items():
        where = f"stages.{name}"
        if not STAGE_NAME.match(name):
            raise ConfigError(f"{where}: a stage name must be letters, digits, '_', '-' or '.' (it names a directory)")
        if st.script not in recipes:
            raise ConfigError(f"{where}.script={st.script!r} is not one of {', '.join(recipes)}")
        source = previous if st.init_from == "previous" else st.init_from
        if source is not None and source not in out:
            raise ConfigError(f"{where}.init_from={st.init_from!r}: no earlier stage of that name (earlier: {list(out)})")
        out[name] = source
        previous = name
    return out


def chain_stages(stages, common, recipes) -> list[Stage]:
    """A chain's ``stages`` (``StageConfig`` by name) as :class:`Stage` s: ``overrides``, then ``common``, then
    ``extra``; each starting from its ``init_from``."""
    sources = stage_sources(stages, recipes)
    return [Stage(name, st.script, [*st.overrides, *common, *st.extra], start=sources[name], init_mode=st.init_mode)
            for name, st in stages.items()]
