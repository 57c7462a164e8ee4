"""The requests and responses of a family's run: one generation request per row, the responses generated for
them with the per-row finishes and their warnings, and the check that a set of responses answers the rows exactly
once. Family-agnostic: :class:`eval_hooks.families.base.Family` calls these with itself where a family is needed.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from selectrust.core.io import DataError
from selectrust.generation.prompts import PromptSettings, prompt_messages
from selectrust.generation.response_log import ResponseLog


def build_requests(rows: Sequence[dict], *, max_new_tokens: int = 256, temperature: float = 0.0,
                   stop: Sequence[str] | None = None, prompt_settings: PromptSettings | None = None,
                   seed: int | None = None):
    """One :class:`GenerationRequest` per row, as chat ``messages``: the row's prompt with the system turn
    and prefix of ``prompt_settings`` (:func:`selectrust.generation.prompts.prompt_messages`). The backend renders
    them to ids with the same settings' template switch (:func:`selectrust.generation.prompts.render_prompt`)."""
    from selectrust.generation.backends.base import GenerationRequest

    settings = prompt_settings or PromptSettings()
    return [GenerationRequest(messages=prompt_messages(r["prompt"], settings), max_new_tokens=max_new_tokens,
                              temperature=temperature, stop=list(stop or []), seed=seed) for r in rows]


def generate_responses(backend, rows: Sequence[dict], *, desc: str, max_new_tokens: int = 256,
                       temperature: float = 0.0, stop: Sequence[str] | None = None,
                       progress: bool = True) -> tuple[dict[str, str], dict[str, Any], dict[str, dict]]:
    """One greedy (or sampled) response per row from ``backend``, under the backend's ``prompt_settings``:
    ``({row_id: text}, settings, {row_id: {"finish_reason": ..., "null_content": ...}})``, the settings being
    what ``metrics.json`` records as ``eval_settings``. A :class:`~selectrust.generation.response_log.ResponseLog` backend
    is told each request's row id (written beside its saved response)."""
    settings = getattr(backend, "prompt_settings", None) or PromptSettings()
    reqs = build_requests(rows, max_new_tokens=max_new_tokens, temperature=temperature, stop=stop,
                          prompt_settings=settings)
    named = {"row_ids": [r["row_id"] for r in rows]} if isinstance(backend, ResponseLog) else {}
    results = backend.generate(reqs, progress=progress, desc=desc, **named)
    if len(results) != len(rows):
        raise RuntimeError(f"backend returned {len(results)} results for {len(rows)} requests")
    responses = {r["row_id"]: res.samples[0].text for r, res in zip(rows, results)}
    finishes = {r["row_id"]: {"finish_reason": res.samples[0].finish_reason,
                              "null_content": getattr(res.samples[0], "null_content", False)}
                for r, res in zip(rows, results)}
    described = {"backend": getattr(backend, "name", type(backend).__name__), "max_new_tokens": max_new_tokens,
                 "temperature": temperature, "stop": list(stop or []), **settings.describe()}
    return responses, described, finishes


def generation_warnings(finishes: Mapping[str, Mapping], max_new_tokens: Any = None) -> tuple[dict, list[str]]:
    """``({"n_null_content": .., "n_finish_length": ..}, warnings)`` of the per-row finishes of
    :func:`generate_responses`: rows the server sent no text for, and rows cut at the token budget."""
    n = len(finishes)
    null = sum(bool(f.get("null_content")) for f in finishes.values())
    length = sum(f.get("finish_reason") == "length" for f in finishes.values())
    warnings = []
    if null:
        warnings.append(f"{null} of {n} rows got no content from the server (content: null); they are scored as "
                        "no answer")
    if length:
        budget = f" (max_new_tokens={max_new_tokens})" if max_new_tokens is not None else ""
        warnings.append(f"{length} of {n} rows stopped at the token budget{budget} (finish_reason 'length'); their "
                        "answers may be cut off")
    return {"n_null_content": null, "n_finish_length": length}, warnings


def check_responses(rows: Sequence[dict], responses: Mapping[str, str], source: str | None) -> None:
    """Exactly one response per row, none for an unknown row id, and unique row ids (:class:`DataError`
    naming ``source``)."""
    ids = [r["row_id"] for r in rows]
    if len(set(ids)) != len(ids):
        seen = set()
        dup = next(i for i in ids if i in seen or seen.add(i))
        raise DataError(f"duplicate row_id {dup!r} among the rows", field="row_id", accepted="unique row ids")
    idset = set(ids)
    unknown = [k for k in responses if k not in idset]
    if unknown:
        raise DataError(f"{len(unknown)} response(s) for unknown row ids, e.g. {unknown[:3]}", path=source,
                        field="row_id", accepted="row ids of the rows being scored")
    missing = [i for i in ids if i not in responses]
    if missing:
        raise DataError(f"no response for {len(missing)} of {len(ids)} rows, e.g. {missing[:3]}", path=source,
                        field="row_id", accepted="exactly one response per row")
