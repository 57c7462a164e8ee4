"""SCOPE pair mining (docs/scope.md#pair-mining): r+ / r- from the base model's own outputs.

The algorithm behind ``recipes/mine_pairs.py`` (which loads the items and the model, then calls :func:`mine`).
For every MIST training item the base model answers the clean and the misleading row (greedy). An item is
kept when the clean answer is correct and the misleading answer is wrong *by following the signal* (the
parsed answer equals the item's ``wrong_value``): r+ = the clean completion, r- = the misleading
completion. When the clean answer is wrong, r+ may come from a fallback elicited with a private diagnostic
note (``fallback_note``); the note is never part of any DPO prompt, and fallbacks whose text matches
``leak_patterns`` (mentions of a note, hint, answer key, ...) or echoes the note's wording are dropped. The
same (r+, r-) is then written under all four contexts (a quartet).

Knowledge-aware mining (``knowledge`` enabled, docs/scope.md#knowledge-aware-scope): each item's clean answer
is first sampled ``knowledge.k`` times; quartets come from *known* items only and *unknown* items give the
unknown pools (pair rows with ``pool: unknown_correct`` / ``unknown_irrelevant``, :func:`unknown_pairs`).
Items about invented entities (rows of ``source: invented``, issue 61: ``build-facts --invented-items``) are never
a quartet, in either mining, even when the base gives their answer by chance or a fallback elicits it; they feed the
unknown pools like any item the estimate labels unknown (``mining_stats.json``'s ``invented`` counts them).

The rows are the pair-file format of :mod:`trainer.data.train_data`; the backend is any generation backend
(tests use scripted ones). Evaluation's prompts, parsers and knowledge estimate are imported when mining runs.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import asdict

from selectrust.conditions import (CLEAN, CORRECT, IRRELEVANT, MINED_CONDITIONS, MISLEADING, MIST_CONDITIONS,
                                   UNKNOWN_CORRECT, UNKNOWN_IRRELEVANT)
from eval_hooks.evaluate import build_requests
from selectrust.generation.prompts import PromptSettings
from eval_hooks.parsers import parse_row_answer, row_answer_matches
from eval_hooks.knowledge import estimate_from_config
from eval_hooks.knowledge import knowledge_record, summarize
from eval_hooks.builders.facts.invented import SOURCE as INVENTED


def leaks_note(text: str, *, patterns, note: str) -> bool:
    """True when a fallback completion betrays the private note: a pattern occurs (case-insensitive)
    or it repeats six or more consecutive words of the note's own wording."""
    low = text.lower()
    if any(p.lower() in low for p in patterns):
        return True
    norm = " ".join(re.findall(r"[a-z0-9]+", low))
    words = re.findall(r"[a-z0-9]+", note.lower().replace("{gold}", " "))
    return any(" ".join(words[i:i + 6]) in norm for i in range(max(0, len(words) - 5)))


def mine(rows: list[dict], backend, *, max_new_tokens: int, use_fallback: bool, fallback_note: str,
         leak_patterns, model_name: str, prompt_settings=None, knowledge=None,
         seed: int = 0) -> tuple[list[dict], dict]:
    """Pure mining logic over validated MIST rows and a generation backend -> (pair rows, stats).
    Prompts are rendered under ``prompt_settings`` (the ``prompt`` group; default: the backend's), the
    settings the mined pairs are then trained and evaluated under.

    ``knowledge`` (the ``knowledge`` config group, or None = plain SCOPE mining): estimate per item
    whether the model knows the answer (``eval_hooks.knowledge``); SCOPE quartets come from *known*
    items only, *unknown* items feed the unknown pools (:func:`unknown_pairs`), *uncertain* ones neither."""
    by_item: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in rows:
        by_item[r["item_id"]][r["condition"]] = r
    items = sorted(by_item)
    settings = prompt_settings or getattr(backend, "prompt_settings", None)
    est, extra, unknown_dropped = None, [], {}
    if knowledge is not None and knowledge.enabled:
        est, extra, unknown_dropped = knowledge_pools(by_item, backend, knowledge=knowledge, model_name=model_name,
                                                      max_new_tokens=max_new_tokens, prompt_settings=settings,
                                                      seed=seed)
        items = [i for i in items if est[i]["knowledge"] == "known"]
    every_invented = _invented_items(by_item)
    invented = every_invented.intersection(items)  # those the quartets would otherwise take
    items = [i for i in items if i not in invented]
    asked = [by_item[i][c] for i in items for c in MINED_CONDITIONS]
    results = build_requests(asked, max_new_tokens=max_new_tokens, prompt_settings=settings)
    outs = backend.generate(results, progress=True, desc="mine")
    text = {(r["item_id"], r["condition"]): o.samples[0].text for r, o in zip(asked, outs)}
    cut = {(r["item_id"], r["condition"]) for r, o in zip(asked, outs) if o.samples[0].finish_reason == "length"}

    kept, dropped, need_fallback = _first_pass(items, by_item, text, cut, use_fallback=use_fallback)
    if need_fallback:
        _fallback_pass(need_fallback, by_item, text, backend, kept, dropped, max_new_tokens=max_new_tokens,
                       fallback_note=fallback_note, leak_patterns=leak_patterns, prompt_settings=settings)
    pairs = _quartets(items, by_item, kept, model_name=model_name, est=est)
    stats = {"items": len(by_item), "kept": len(kept), "dropped": len(dropped),
             "kept_by_source": dict(Counter(k["chosen_source"] for k in kept.values())),
             "dropped_by_reason": dict(Counter(dropped.values())), "dropped_items": dropped,
             "max_new_tokens": max_new_tokens,
             "cut_off": {**{c: sum((i, c) in cut for i in items) for c in MINED_CONDITIONS},
                         "dropped_items": sum(r.endswith("_cut_off") for r in dropped.values())},
             "prompt": (settings or PromptSettings()).describe()}
    if est is not None:
        stats.update(knowledge_stats(est, extra, unknown_dropped, knowledge))
    if every_invented:
        stats["invented"] = _invented_stats(every_invented, est, extra, invented)
    return pairs + extra, stats


def _invented_items(by_item: dict) -> set[str]:
    """The items about invented entities (``source: invented``, issue 61; the facts builder's ``--invented-items``):
    never a SCOPE quartet, even when the base gave the invented answer (by chance) or a fallback would have elicited
    it. No model knows them, so they belong in the unknown pools only."""
    return {i for i, conds in by_item.items() if conds[CLEAN].get("source") == INVENTED}


def _invented_stats(ids: set[str], est: dict | None, extra: list[dict], kept_out: set[str]) -> dict:
    """``mining_stats.json``'s ``invented``: how many invented items there were (``ids``), how many were kept out of
    the quartets (known by the estimate, or every one without an estimate), their knowledge labels and their pairs per
    pool."""
    return {"items": len(ids), "kept_out_of_quartets": len(kept_out),
            "by_knowledge": dict(Counter(est[i]["knowledge"] for i in ids)) if est is not None else None,
            "per_pool": dict(Counter(p["pool"] for p in extra if p["item_id"] in ids))}


def _judge(row: dict, response: str):
    """(parsed answer, correct, equals the row's ``wrong_value``) of ``response`` to ``row``."""
    parsed = parse_row_answer(response, row)
    return parsed, row_answer_matches(parsed, row), row_answer_matches(parsed, row, "wrong_value")


def _first_pass(items: list[str], by_item: dict, text: dict, cut: set, *,
                use_fallback: bool) -> tuple[dict, dict, list[str]]:
    """Each item's clean and misleading answers judged: (kept {item: pair}, dropped {item: reason}, the items
    whose clean answer was wrong and that a fallback may still keep)."""
    kept, dropped, need_fallback = {}, {}, []
    for i in items:
        clean, mis = by_item[i][CLEAN], by_item[i][MISLEADING]
        cut_conds = [c for c in MINED_CONDITIONS if (i, c) in cut]
        if cut_conds:  # no EOS within the budget: the answer may be unfinished; never trained on
            dropped[i] = f"{cut_conds[0]}_cut_off"
            continue
        _, clean_ok, _ = _judge(clean, text[(i, CLEAN)])
        parsed_m, mis_ok, follows = _judge(mis, text[(i, MISLEADING)])
        if mis_ok:
            dropped[i] = "resisted_misleading"
        elif not follows:
            dropped[i] = "misleading_wrong_but_not_signal" if parsed_m is not None else "misleading_unparsable"
        elif clean_ok:
            kept[i] = {"chosen": text[(i, CLEAN)], "rejected": text[(i, MISLEADING)], "chosen_source": CLEAN}
        elif use_fallback:
            need_fallback.append(i)
        else:
            dropped[i] = "clean_wrong"
    return kept, dropped, need_fallback


def _fallback_pass(need_fallback: list[str], by_item: dict, text: dict, backend, kept: dict, dropped: dict, *,
                   max_new_tokens: int, fallback_note: str, leak_patterns, prompt_settings) -> None:
    """r+ elicited with the private note for ``need_fallback``; each item goes into ``kept`` or ``dropped``."""
    fb_rows = []
    for i in need_fallback:
        clean = by_item[i][CLEAN]
        note = fallback_note.format(gold=clean["gold"])
        fb_rows.append({**clean, "prompt": f"{note}\n\n{clean['prompt']}"})
    fb_out = backend.generate(build_requests(fb_rows, max_new_tokens=max_new_tokens,
                                             prompt_settings=prompt_settings), progress=True, desc="fallback")
    for i, row, o in zip(need_fallback, fb_rows, fb_out):
        response = o.samples[0].text
        _, ok, _ = _judge(by_item[i][CLEAN], response)
        if o.samples[0].finish_reason == "length":
            dropped[i] = "fallback_cut_off"
        elif not ok:
            dropped[i] = "fallback_wrong"
        elif leaks_note(response, patterns=leak_patterns, note=fallback_note):
            dropped[i] = "fallback_leaks_note"
        else:
            kept[i] = {"chosen": response, "rejected": text[(i, MISLEADING)], "chosen_source": "fallback"}


def _quartets(items: list[str], by_item: dict, kept: dict, *, model_name: str, est: dict | None) -> list[dict]:
    """The pair rows: each kept item's (r+, r-) under all four MIST contexts, in ``items`` order."""
    pairs = []
    for i in items:
        if i not in kept:
            continue
        for c in MIST_CONDITIONS:
            src = by_item[i][c]
            pairs.append({"pair_id": f"pair-{i}", "item_id": i, "condition": c, "prompt": src["prompt"],
                          "chosen": kept[i]["chosen"], "rejected": kept[i]["rejected"],
                          "chosen_source": kept[i]["chosen_source"], "chosen_finish": "stop",
                          "rejected_finish": "stop", "gold": src["gold"],
                          "wrong_value": src["wrong_value"], "channel": src.get("channel"),
                          "mined_with": model_name, **_knowledge_fields(est, i)})
    return pairs


def knowledge_pools(by_item: dict, backend, *, knowledge, model_name: str, max_new_tokens: int, prompt_settings,
                    seed: int) -> tuple[dict, list[dict], dict]:
    """The knowledge estimate of every item's clean row, then the unknown pools: (estimates, pair rows,
    {item_id: drop reason})."""
    est = estimate_from_config([by_item[i][CLEAN] for i in sorted(by_item)], backend, knowledge,
                               max_new_tokens=max_new_tokens, prompt_settings=prompt_settings, seed=seed)
    extra, dropped = unknown_pairs(by_item, est, backend, knowledge=knowledge, model_name=model_name,
                                   max_new_tokens=max_new_tokens, prompt_settings=prompt_settings)
    return est, extra, dropped


def knowledge_stats(est: dict, extra: list[dict], unknown_dropped: dict, knowledge) -> dict:
    """``mining_stats.json``'s ``knowledge`` summary, plus ``knowledge_items`` (popped into knowledge.jsonl)."""
    return {"knowledge": {**summarize(est), "settings": asdict(knowledge),
                          "scope_quartets_from": "known items only",
                          "per_pool": dict(Counter(p["pool"] for p in extra)),
                          "unknown_dropped_by_reason": dict(Counter(unknown_dropped.values())),
                          "unknown_dropped_items": unknown_dropped},
            "knowledge_items": [knowledge_record(e) for e in est.values()]}


def _knowledge_fields(est, item_id: str) -> dict:
    """The per-item knowledge estimate carried by every mined pair row (nothing without an estimate)."""
    if est is None:
        return {}
    return {"knowledge": est[item_id]["knowledge"], "clean_accuracy": est[item_id]["clean_accuracy"]}


def unknown_pairs(by_item: dict, est: dict, backend, *, knowledge, model_name: str, max_new_tokens: int,
                  prompt_settings) -> tuple[list[dict], dict]:
    """The unknown pools (docs/scope.md#knowledge-aware-scope) over the items estimated *unknown*.

    - ``unknown_correct``: the correct-context prompt; chosen = the model's own completion under that
      prompt when it gives the gold (the answer that uses the hint), rejected = one of its sampled clean
      answers that is wrong (the first non-empty one, in sample order). Items whose correct-context
      answer is not the gold are dropped (``correct_context_wrong``): there is no on-policy text that
      uses the hint; so are items whose wrong samples are all empty (``no_nonempty_wrong_sample``).
    - ``unknown_irrelevant`` (``knowledge.unknown_irrelevant``), only for items whose clean answer is
      *stable* (the most frequent parsed answer has share >= ``knowledge.stable_threshold`` of the k
      samples): the irrelevant-context prompt; chosen = a clean sample with that modal answer, rejected
      = the unknown-correct chosen. It says: without a hint, keep your own answer; the gold is reachable
      only through the hint (so the correct pool teaches hint use, not the training item's fact).
    Returns (pair rows with ``pool``, {item_id: drop reason})."""
    unknown = [i for i in sorted(est) if est[i]["knowledge"] == "unknown"]
    rows = [by_item[i][CORRECT] for i in unknown]
    outs = backend.generate(build_requests(rows, max_new_tokens=max_new_tokens, prompt_settings=prompt_settings),
                            progress=True, desc="unknown")
    pairs, dropped = [], {}
    for i, row, o in zip(unknown, rows, outs):
        text, e = o.samples[0].text, est[i]
        if o.samples[0].finish_reason == "length":
            dropped[i] = "correct_context_cut_off"
            continue
        if not row_answer_matches(parse_row_answer(text, row), row):
            dropped[i] = "correct_context_wrong"
            continue
        wrong = next((t for t, ok in zip(e["texts"], e["correct"]) if not ok and t.strip()), None)
        if wrong is None:  # every wrong sample was empty: nothing to prefer the hinted answer over
            dropped[i] = "no_nonempty_wrong_sample"
            continue
        common = {"item_id": i, "gold": row["gold"], "wrong_value": row["wrong_value"], "mined_with": model_name,
                  **_knowledge_fields(est, i)}
        pairs.append({"pair_id": f"unknown-{i}", "condition": CORRECT, "pool": UNKNOWN_CORRECT,
                      "prompt": row["prompt"], "chosen": text, "rejected": wrong,
                      "chosen_source": "correct_context", **common})
        # the modal answer must be a wrong one (with score=accuracy the thresholds make it so; the others may not)
        own = next((t for t, s, ok in zip(e["texts"], e["samples"], e["correct"]) if s == e["modal_answer"] and not ok),
                   None)
        if knowledge.unknown_irrelevant and e["modal_answer"] is not None and own is not None and \
                e["modal_share"] >= knowledge.stable_threshold:
            pairs.append({"pair_id": f"unknown-{i}", "condition": IRRELEVANT, "pool": UNKNOWN_IRRELEVANT,
                          "prompt": by_item[i][IRRELEVANT]["prompt"], "chosen": own, "rejected": text,
                          "chosen_source": "clean_modal", **common})
    return pairs, dropped
