"""Runs that move: a finished stage's saved config compared with the one composed now as if both had been written
in one out dir and one model cache, so a copied or moved out dir (or another ``SELECTRUST_CACHE`` holding the same
entry) reuses its finished stages (:class:`recipes.stages.StageRunner`).

A stage's config names paths inside the out dir it ran in (its own directory, an earlier stage's pairs file or
``final/`` adapter, the facts files) and the model by its cache entry's directory. :func:`portable` writes both
kinds of path in a form that does not depend on where they were: the out dir as ``<out>`` (in any string: a path, or
an override holding one) and a model cache entry's directory as ``<cache>/<entry>``; an entry's name is its content
key (``gguf-<sha256[:16]>`` of the GGUF file, ``<tiny preset>-<spec key>``), so two caches holding one entry name
the same weights (each load checks the entry against its manifest, and the stage's start weights and inputs are
pinned by their content hash besides: ``recipes/stages/start.py``). Where a saved config ran, and where it runs
now, are read from the configs themselves: the run's (stage's) directory then and now (``trainer.run_dir`` or
``out_dir``) less the components they end in alike (:func:`moved_roots`). A trainer run's resume check compares
the same way (``trainer/runtime/run_dir.py``), so a moved run that was cut short resumes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from selectrust.model import TINY_PRESETS

__all__ = ["OUT", "CACHE", "moved_roots", "portable", "portable_pair", "relocated", "started_from"]

OUT, CACHE = "<out>", "<cache>"


def _entry_name() -> re.Pattern:
    """The directory name of a model cache entry: ``gguf-<16 hex>`` or ``<tiny preset>-<12 hex>``."""
    presets = "|".join(re.escape(p) for p in sorted(TINY_PRESETS, key=len, reverse=True))
    return re.compile(rf"gguf-[0-9a-f]{{16}}|(?:{presets})-[0-9a-f]{{12}}")


def portable(value: Any, root: Path | str | None, entry: re.Pattern | None = None) -> Any:
    """``value`` (a config as nested dicts and lists) with ``root`` written ``<out>`` wherever a string holds it as a
    whole path component, and every absolute path to a model cache entry written ``<cache>/<entry name>``."""
    entry = entry or _entry_name()
    if isinstance(value, dict):
        return {k: portable(v, root, entry) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v, root, entry) for v in value]
    if not isinstance(value, str):
        return value
    if root is not None and str(root) not in ("", "/"):
        value = re.sub(re.escape(str(root)) + r"(?=/|'|\"|$)", OUT, value)
    path = Path(value)
    if path.is_absolute() and entry.fullmatch(path.name):
        return f"{CACHE}/{path.name}"
    return value


def moved_roots(saved_dir: str | None, now_dir: str | None) -> tuple[Path | None, Path | None]:
    """``(where, where now)`` of a moved run: ``saved_dir`` and ``now_dir`` (the run's or stage's directory then and
    now) less the path components they end in alike (``stages/eval_base``); ``(None, None)`` when they are the same
    path, share no last component, or one is not given."""
    if not saved_dir or not now_dir or Path(saved_dir) == Path(now_dir):
        return None, None
    a, b = Path(saved_dir).parts, Path(now_dir).parts
    n = 0
    while n < min(len(a), len(b)) - 1 and a[-1 - n] == b[-1 - n]:
        n += 1
    if n == 0:
        return None, None
    return Path(*a[:-n]), Path(*b[:-n])


def _at(config: dict, key: str) -> str | None:
    node: Any = config
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, str) else None


def portable_pair(saved: dict, now: dict, key: str) -> tuple[dict, dict]:
    """``(saved, now)`` in portable form (:func:`portable`), each relative to the root its ``key`` (the run's or
    stage's directory: ``trainer.run_dir``, ``out_dir``) says it ran in (:func:`moved_roots`)."""
    was, where = moved_roots(_at(saved, key), _at(now, key))
    entry = _entry_name()
    return portable(saved, was, entry), portable(now, where, entry)


def relocated(path: str | None, was: Path | None, where: Path | None) -> str | None:
    """``path`` as it reads after a move: under the out dir ``was``, the same place under ``where``; a model cache
    entry that is gone from where it was, the entry of that name in this process's cache root
    (``SELECTRUST_CACHE``) when it holds one; else unchanged."""
    if not path:
        return path
    p = Path(path)
    if was is not None and where is not None and (p == was or was in p.parents):
        return str(where / p.relative_to(was))
    if p.is_absolute() and not p.exists() and _entry_name().fullmatch(p.name):
        from selectrust.model import cache_root

        if (cache_root() / p.name).is_dir():
            return str(cache_root() / p.name)
    return path


def started_from(stage_dir: Path):
    """The ``model`` node of the finished training stage in ``stage_dir`` (its saved ``config.yaml``), its
    ``path`` and ``init_adapter`` :func:`relocated` to where the stage's out dir and the model cache are now: what a
    stage continuing its adapter starts from."""
    from omegaconf import OmegaConf  # deferred: imports omegaconf

    cfg = OmegaConf.load(Path(stage_dir) / "config.yaml")
    was, where = moved_roots(OmegaConf.select(cfg, "trainer.run_dir", default=None), str(stage_dir))
    model = cfg.model
    model.path = relocated(model.path, was, where)
    if model.get("init_adapter"):
        model.init_adapter = relocated(model.init_adapter, was, where)
    return model
