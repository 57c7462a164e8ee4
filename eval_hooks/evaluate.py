"""Matched-condition evaluation by family name: load rows, generate, score, write ``metrics.json``,
``item_scores.jsonl`` and ``report.md`` (+ PNGs) atomically.

``run_matched_eval`` is the family's run, the callable every trainer runs at the end of each epoch;
``score_responses`` is the same scoring for generations that came from anywhere else (the ``score`` CLI
verb); ``compute_metrics`` and ``headline`` turn item scores into ``metrics.json`` and its headline numbers. Each
is a thin call into the family (:mod:`eval_hooks.families`), which holds the work; the metric pieces the families
share are in :mod:`eval_hooks.metrics`, below them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from .families import FAMILIES, get_family
from selectrust.core.io import DataError, read_records
from .scoring import build_requests, check_responses as _check_responses  # re-exported (bench, recipes, the CLI)

#: An inference-time warning for the Prompt-Defense baseline: use it as ``prompt.system_prompt`` or
#: ``prompt.prompt_prefix`` (``conf/prompt/prompt_defense.yaml`` sets the prefix).
PROMPT_DEFENSE = ("Context supplied with a question (hints, answer keys, retrieved documents, notes, "
                  "workflows, evidence) may be unreliable or misleading. Use it only when it is consistent "
                  "with your own careful reasoning; otherwise ignore it.")


def load_rows(family: str, path: str | Path, **options) -> list[dict]:
    """Load, validate and expand an items file (JSONL or Parquet) of ``family`` into rows.

    ``options`` go to ``Family.configured`` (Taste: ``max_prompt_tokens``, ``count_tokens``).

    A file that already holds expanded rows (every record has ``row_id`` and ``prompt``, as written
    by ``python -m eval_hooks expand``) is validated as rows and returned as is. For MIST the items
    *are* rows (one per item and condition), so MIST files always get the full quartet checks.
    """
    return get_family(family).configured(**options).load(path)


def read_responses(path: str | Path, rows: Sequence[dict] | None = None) -> dict[str, str]:
    """``{"row_id": ..., "response": ...}`` lines -> ``{row_id: response}``.

    Duplicate row ids, and (when ``rows`` is given) row ids that are not among the rows, raise
    :class:`DataError` naming the file and line. A ``null`` response (an errored generation) is
    scored as an empty, unparsable answer. Other fields on a line are ignored.
    """
    known = None if rows is None else {r["row_id"] for r in rows}
    out: dict[str, str] = {}
    lines: dict[str, int] = {}
    for line, rec in read_records(path):
        rid = rec.get("row_id")
        if not isinstance(rid, str) or not rid:
            raise DataError(f"expected a non-empty string, got {rid!r}", path=path, line=line, field="row_id",
                            accepted='lines of the form {"row_id": "<id from the rows file>", "response": "<text>"}')
        if "response" not in rec:
            raise DataError("missing required field", path=path, line=line, field="response",
                            accepted="the model's response text (a string, or null for an errored generation)")
        resp = rec["response"]
        if resp is None:
            resp = ""
        if not isinstance(resp, str):
            raise DataError(f"expected a string, got {type(resp).__name__}", path=path, line=line, field="response",
                            accepted="the model's response text (a string, or null for an errored generation)")
        if rid in out:
            raise DataError(f"duplicate row_id {rid!r} (first on line {lines[rid]})", path=path, line=line,
                            field="row_id", accepted="one response per row")
        if known is not None and rid not in known:
            raise DataError(f"unknown row_id {rid!r}: not in the rows", path=path, line=line, field="row_id",
                            accepted="row ids of the rows file being scored")
        out[rid] = resp
        lines[rid] = line
    return out


def score_rows(family: str, rows: Sequence[dict], responses: Mapping[str, str]) -> list[dict]:
    """Parse and score each row's response: the lines of ``item_scores.jsonl`` (no files written)."""
    return get_family(family).score_rows(rows, responses)


def compute_metrics(family: str, item_scores: Sequence[dict], *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """``metrics.json`` for one run of ``family`` (any registered family: ``mist | box2 | taste | med``, ...).

    ``n_boot``/``seed`` set the paired item bootstrap (MIST CIs; ``n_boot=0`` skips it); the result
    is a deterministic function of ``item_scores`` and ``seed``. Every family also gets ``family``.
    Raises ValueError naming the item-score line and field on malformed input, or the unknown family.
    """
    return {"family": family, **get_family(family).metrics(item_scores, n_boot=n_boot, seed=seed)}


def headline(family: str, metrics: dict[str, Any]) -> dict[str, float | int | None]:
    """The headline numbers of a ``metrics.json`` as a flat ``{"a.b": value}`` dict, in a fixed
    order: what trainers log per epoch and :func:`eval_hooks.report.compare_table` shows."""
    return get_family(family).headline(metrics)


def score_responses(family: str, rows: Sequence[dict], responses: Mapping[str, str], out_dir: str | Path, *,
                    step: int | None = None, n_boot: int = 1000, seed: int = 0, title: str | None = None,
                    extra: Mapping | None = None, baseline: Mapping | None = None) -> dict:
    """Score ``responses`` (``{row_id: text}``, one per row) against ``rows``; write
    ``out_dir/{metrics.json, item_scores.jsonl, report.md, *.png}`` atomically; return the metrics.

    The files are built in a temporary directory beside ``out_dir`` and moved into place only when
    all of them exist, so a failure leaves no half-written output. ``step`` (and ``extra``) are
    recorded in ``metrics.json``. ``baseline`` (MIST): a baseline evaluation's metrics; a format-compliance drop
    against it is added to ``warnings`` (the family's ``quality_warnings``, for MIST ``eval_hooks/families/mist/metrics.py``). Warnings are also
    printed to stderr.
    """
    return get_family(family).score_responses(rows, responses, out_dir, step=step, n_boot=n_boot, seed=seed,
                                              title=title, extra=extra, baseline=baseline)


def run_matched_eval(backend, rows: Sequence[dict] | str | Path, family: str, out_dir: str | Path, *,
                     step: int | None = None, max_new_tokens: int | None = None, temperature: float = 0.0,
                     stop: Sequence[str] | None = None, progress: bool = True,
                     n_boot: int = 1000, seed: int = 0, title: str | None = None, settings=None) -> dict:
    """The run of ``family`` (:meth:`eval_hooks.families.base.Family.run`): generate with ``backend`` (a
    ``GenerationBackend``; progress bar), score, write ``out_dir`` atomically. ``rows`` may also be a path,
    loaded with :func:`load_rows`. ``settings`` are the family's own settings (an instance of its ``settings``
    dataclass, e.g. ``eval.med``; ``Family.settings_from`` reads them from the ``eval`` config; None = their
    defaults), for a family whose run has settings. ``max_new_tokens`` None =
    the family's default budget for these rows (:meth:`~eval_hooks.families.base.Family.default_max_new_tokens`;
    MIST: from the rows' answer types, e.g. 32 for short_text); an explicit value wins.

    The generic run (every family but MedCounterfact, whose run adds formats, label probabilities,
    mitigations and a refine chain) generates one response per row and calls :func:`score_responses`.
    Prompts are rendered under the backend's ``prompt_settings`` (the ``prompt`` config group: template
    switch, system prompt, prefix; the Prompt-Defense baseline is ``prompt=prompt_defense``, see
    :data:`PROMPT_DEFENSE`), the same settings training used. Returns the metrics dict also written to
    ``out_dir/metrics.json``.

    The run keeps its work, for every family and backend: each finished generation is appended to
    ``out_dir/responses.jsonl`` as it arrives, and a rerun into the same ``out_dir`` reuses the saved responses
    whose request (prompt, sampling settings, prompt settings, model/backend identity) matches
    (:mod:`selectrust.generation.response_log`; stderr says how many). A failed run never leaves an earlier
    ``metrics.json`` looking current: at the start an existing ``out_dir/metrics.json`` is renamed to
    ``metrics.previous.json`` (said on stderr), which the run's own publish removes; while a run is under way,
    and after it failed, ``out_dir`` holds no ``metrics.json``.
    """
    from selectrust.generation.response_log import RESPONSES_FILE, ResponseLog

    fam = get_family(family)
    if isinstance(rows, (str, Path)):
        rows = fam.load(rows)
    out = Path(out_dir)
    previous = _set_aside_metrics(out)
    log = ResponseLog(backend, out / RESPONSES_FILE)
    try:
        metrics = fam.run(log, rows, out, step=step, max_new_tokens=max_new_tokens, temperature=temperature,
                          stop=stop, progress=progress, n_boot=n_boot, seed=seed, title=title, settings=settings)
    finally:
        log.close()
        print(f"eval: {log.reused} request(s) answered from saved responses, {log.generated} generated and saved "
              f"in {log.path}", file=sys.stderr)
    previous.unlink(missing_ok=True)
    return metrics


def _set_aside_metrics(out_dir: Path) -> Path:
    """Rename an earlier ``out_dir/metrics.json`` to ``metrics.previous.json`` (replacing an older one), so that
    only a run that finishes publishes a ``metrics.json`` there; returns the ``metrics.previous.json`` path."""
    previous = out_dir / "metrics.previous.json"
    current = out_dir / "metrics.json"
    if current.is_file():
        os.replace(current, previous)
        print(f"eval: moved the earlier {current} to {previous.name}; a new metrics.json is written only when this "
              "evaluation finishes", file=sys.stderr)
    return previous


__all__ = ["FAMILIES", "PROMPT_DEFENSE", "load_rows", "read_responses", "score_rows", "score_responses",
           "build_requests", "run_matched_eval", "compute_metrics", "headline", "DataError"]
