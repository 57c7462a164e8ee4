"""A stage cache shared across runs (issue 60, Deliver 2): the real demo's seed-independent stages, computed once.

Once the split is fixed (``real.fixed_split``), the base's evaluations (held-out items, held-out relation, NQ-Swap on
its fixed set) with its knowledge estimate, and mining, are the same work in every seed's run: the demo gives them
a fixed seed (``demos.real.pipeline.SEEDLESS``, :attr:`trainer.runtime.stage.Stage.seed`), so their composed config,
and with it their completion record (``stage_complete.json``: config, input hashes, output hashes, provenance), is
the same in every run. With ``real.stage_cache=DIR``:

- **before the run** (:func:`restore`), each such stage the run has not made yet is copied from
  ``DIR/<key>/<stage>/`` when there; the stage runner then checks the copy as it checks its own finished stages
  (its config, relocated to this out dir; each input by content; each output by hash; the provenance under
  ``reuse: strict``) and reuses it ("already complete ..., reused") or, on any difference, runs the stage again
  (the copy moved aside). The cache is never trusted on its own;
- **after the run** (:func:`save`), each such stage that finished is copied into the cache (replacing an entry whose
  record differs), written in a temporary sibling and renamed into place.

``<key>`` is a sha256 of what selects the candidate (the stage's name, recipe, overrides, inputs and seed; the facts
size and split rule; the model; the NQ-Swap settings, for NQ-Swap's stages only (a run with NQ-Swap and one without
share the base's other stages: the test seeds' first run lost six minutes to that); the commit; ``real.invented_items`` for a stage that reads the
training file, mining, so that a run with invented items and one without each keep their entry while sharing the
base's evaluations, whose files are the same); what decides is the runner's check (it hashes each input's content).
The other stages' settings (``real.stages``: an arm's overrides) are not in it: a stage's own overrides are, so a run
that changes an arm's settings reuses the base's stages. Nor is the demo's name: the main job (``demo=real``) and the
full experiment (``demo=real_full``) with the same facts, split and sample share the base's stages. A seed
then pays for its trained arms alone (and the cheap steps: conversion, facts build, NQ-Swap rows).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from trainer.runtime.provenance import git_commit
from trainer.runtime.stage import Stage

from .items import heldout_items
from .nq_swap import PREFIX as NQ_PREFIX
from .prompts import TRAIN

COMPLETE = "stage_complete.json"


def cached_stages(plan: list[Stage]) -> list[Stage]:
    """The plan's seed-independent recipe stages (a fixed :attr:`Stage.seed`)."""
    return [s for s in plan if s.recipe is not None and s.seed is not None]


def key(cfg, stage: Stage) -> str:
    """The cache key of ``stage`` in the run of ``cfg`` (module docstring)."""
    real = cfg.real
    what: dict[str, Any] = {
        "stage": stage.name, "recipe": stage.recipe, "overrides": list(stage.overrides),
        "inputs": dict(stage.inputs), "seed": stage.seed,
        "facts_size": str(real.facts_size) if real.facts_size is not None else None,
        "fixed_split": bool(real.fixed_split), "split": str(real.split), "model": str(real.model),
        "heldout_items": heldout_items(cfg),
        # the commit the run's code is at: one entry per commit, so runs on two commits do not replace each other's
        # (the runner would refuse the other commit's copy anyway: its provenance differs)
        "commit": git_commit(),
    }
    if stage.name.startswith(NQ_PREFIX):  # NQ-Swap's own stages only: the base's other stages are the same without it
        what["nq_swap"] = [real.nq_swap_questions, real.nq_swap_seed, real.nq_swap_max_context_words,
                           real.nq_swap_data]
    if real.invented_items and TRAIN in stage.inputs.values():  # issue 61: another training file (mining's input);
        what["invented_items"] = int(real.invented_items)  # the base's evaluations keep their key, their files the same
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _entry(cache: Path, cfg, stage: Stage) -> Path:
    return Path(cache).expanduser() / key(cfg, stage) / stage.name


def restore(cfg, plan: list[Stage], cache: str | Path, out: str | Path, log=print) -> list[str]:
    """Copy each cached stage the run has not made yet (no directory) from the cache into ``out/stages/``; returns
    the stage names copied."""
    copied = []
    for stage in cached_stages(plan):
        src, dest = _entry(Path(cache), cfg, stage), Path(out) / "stages" / stage.name
        if dest.exists() or not (src / COMPLETE).is_file():
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.from-cache-{os.getpid()}")
        shutil.copytree(src, tmp)
        tmp.replace(dest)
        copied.append(stage.name)
        log(f"{stage.name}: copied from the stage cache ({src}); the stage runner checks it before reuse")
    return copied


def save(cfg, plan: list[Stage], cache: str | Path, out: str | Path) -> list[str]:
    """Copy each cached stage that finished in ``out`` into the cache (an entry whose record differs is replaced);
    returns the stage names written."""
    written = []
    for stage in cached_stages(plan):
        src, dest = Path(out) / "stages" / stage.name, _entry(Path(cache), cfg, stage)
        if not (src / COMPLETE).is_file():
            continue
        if (dest / COMPLETE).is_file() and (dest / COMPLETE).read_bytes() == (src / COMPLETE).read_bytes():
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp)
        if dest.exists():
            shutil.rmtree(dest)
        tmp.replace(dest)
        written.append(stage.name)
    return written
