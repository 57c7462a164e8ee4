"""SCOPE pair mining (docs/scope.md#pair-mining): r+ / r- from the base model's own outputs.

    python recipes/mine_pairs.py                                       # tiny model, toy training items
    python recipes/mine_pairs.py model.path=Qwen/Qwen3-4B items_path=mist_train.jsonl out_dir=runs/pairs

For every MIST training item the base model answers the clean and the misleading row (greedy). An
item is kept when the clean answer is correct and the misleading answer is wrong *by following the
signal* (the parsed answer equals the item's ``wrong_value``): r+ = the clean completion, r- = the
misleading completion. When the clean answer is wrong, r+ may come from a fallback elicited with a
private diagnostic note (``fallback_note``); the note is never part of any DPO prompt, and fallbacks
whose text matches ``leak_patterns`` (mentions of a note, hint, answer key, ...) or echoes the note's
wording are dropped. The same (r+, r-) is then written under all four contexts (a quartet).

Outputs in ``out_dir``: ``pairs.jsonl`` (the pair-file format of ``trainer/data.py``) and
``mining_stats.json`` (kept and dropped items, each drop with its reason).
"""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hydra
from omegaconf import DictConfig

from eval_hooks.vocab import MIST_CONDITIONS as CONDITIONS
from trainer.config import register_schemas, validate_common

register_schemas()


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
         leak_patterns, model_name: str, prompt_settings=None) -> tuple[list[dict], dict]:
    """Pure mining logic over validated MIST rows and a generation backend -> (pair rows, stats).
    Prompts are rendered under ``prompt_settings`` (the ``prompt`` group; default: the backend's), the
    settings the mined pairs are then trained and evaluated under."""
    from eval_hooks.evaluate import build_requests
    from eval_hooks.parsers import answers_match, parse_answer
    from eval_hooks.prompts import PromptSettings

    by_item: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in rows:
        by_item[r["item_id"]][r["condition"]] = r
    items = sorted(by_item)
    asked = [by_item[i][c] for i in items for c in ("clean", "misleading")]
    settings = prompt_settings or getattr(backend, "prompt_settings", None)
    results = build_requests(asked, max_new_tokens=max_new_tokens, prompt_settings=settings)
    outs = backend.generate(results, progress=True, desc="mine")
    text = {(r["item_id"], r["condition"]): o.samples[0].text for r, o in zip(asked, outs)}

    def judge(row, response):
        parsed = parse_answer(response, row["answer_type"], choices=row.get("choices"))
        return parsed, answers_match(parsed, row["gold"], row["answer_type"], choices=row.get("choices")), \
            answers_match(parsed, row["wrong_value"], row["answer_type"], choices=row.get("choices"))

    kept, dropped, need_fallback = {}, {}, []
    for i in items:
        clean, mis = by_item[i]["clean"], by_item[i]["misleading"]
        _, clean_ok, _ = judge(clean, text[(i, "clean")])
        parsed_m, mis_ok, follows = judge(mis, text[(i, "misleading")])
        if mis_ok:
            dropped[i] = "resisted_misleading"
        elif not follows:
            dropped[i] = "misleading_wrong_but_not_signal" if parsed_m is not None else "misleading_unparsable"
        elif clean_ok:
            kept[i] = {"chosen": text[(i, "clean")], "rejected": text[(i, "misleading")], "chosen_source": "clean"}
        elif use_fallback:
            need_fallback.append(i)
        else:
            dropped[i] = "clean_wrong"
    if need_fallback:
        fb_rows = []
        for i in need_fallback:
            clean = by_item[i]["clean"]
            note = fallback_note.format(gold=clean["gold"])
            fb_rows.append({**clean, "prompt": f"{note}\n\n{clean['prompt']}"})
        fb_out = backend.generate(build_requests(fb_rows, max_new_tokens=max_new_tokens,
                                                 prompt_settings=settings), progress=True, desc="fallback")
        for i, row, o in zip(need_fallback, fb_rows, fb_out):
            response = o.samples[0].text
            _, ok, _ = judge(by_item[i]["clean"], response)
            if not ok:
                dropped[i] = "fallback_wrong"
            elif leaks_note(response, patterns=leak_patterns, note=fallback_note):
                dropped[i] = "fallback_leaks_note"
            else:
                kept[i] = {"chosen": response, "rejected": text[(i, "misleading")], "chosen_source": "fallback"}
    pairs = []
    for i in items:
        if i not in kept:
            continue
        for c in CONDITIONS:
            src = by_item[i][c]
            pairs.append({"pair_id": f"pair-{i}", "item_id": i, "condition": c, "prompt": src["prompt"],
                          "chosen": kept[i]["chosen"], "rejected": kept[i]["rejected"],
                          "chosen_source": kept[i]["chosen_source"], "gold": src["gold"],
                          "wrong_value": src["wrong_value"], "channel": src.get("channel"),
                          "mined_with": model_name})
    stats = {"items": len(items), "kept": len(kept), "dropped": len(dropped),
             "kept_by_source": dict(Counter(k["chosen_source"] for k in kept.values())),
             "dropped_by_reason": dict(Counter(dropped.values())), "dropped_items": dropped,
             "prompt": (settings or PromptSettings()).describe()}
    return pairs, stats


def run(cfg: DictConfig) -> dict:
    """Mine; returns the statistics written to ``<out_dir>/mining_stats.json``."""
    from eval_hooks import load_rows
    from eval_hooks.io import write_json_atomic, write_jsonl_atomic
    from eval_hooks.prompts import PromptSettings
    from trainer.data import resolve_data_path
    from trainer.evaluation import build_inference_backend
    from trainer.run import seed_everything

    validate_common(cfg)
    rows = load_rows("mist", resolve_data_path(cfg.items_path))  # validated before the model loads
    seed_everything(cfg.seed)
    prompt = PromptSettings.from_config(cfg.prompt)
    backend = build_inference_backend(cfg.model, cfg.generation, prompt_settings=prompt)
    pairs, stats = mine(rows, backend, max_new_tokens=cfg.max_new_tokens, use_fallback=cfg.use_fallback,
                        fallback_note=cfg.fallback_note, leak_patterns=list(cfg.leak_patterns),
                        model_name=cfg.model.path, prompt_settings=prompt)
    out = Path(cfg.out_dir)
    write_json_atomic(out / "mining_stats.json", stats)
    if pairs:
        write_jsonl_atomic(out / "pairs.jsonl", pairs)
    print(f"[selectrust] mined {stats['kept']} of {stats['items']} items "
          f"({stats['kept_by_source']}); dropped {stats['dropped_by_reason']} -> {out}")
    if not pairs:
        print("[selectrust] no pairs kept: the base model never followed a misleading signal while being "
              "correct when clean (see mining_stats.json)", file=sys.stderr)
    return stats


@hydra.main(config_path="../conf", config_name="mine_pairs", version_base=None)
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    from trainer.cli_help import exit_with_help_if_asked

    exit_with_help_if_asked("mine_pairs")
    main()
