"""The seed table and the frontier plot of several real-demo runs (one per seed), for docs/real_model.md.

    python -m demos.real.seeds RUN_DIR [RUN_DIR ...] --out DIR [--extra LABEL=RUN_DIR ...] [--evidence EVIDENCE_DIR]
    python -m demos.real.seeds --from-evidence EVIDENCE_DIR [...] --markdown

Reads each run's ``summary.json`` (``python recipes/demo.py seed=N out=RUN_DIR``) and writes, in ``DIR``:

- ``seed_table.md``: per evaluation set (held-out items, held-out relation), one row per seed and arm: accuracy in
  the four conditions, the paired SC2W (on the base's clean-correct items) and its ratio to that seed's base,
  ``n_clean_correct``, ``unknown_correct_accuracy`` and the lowest format compliance; NQ-Swap's exact match under
  the original passage, p_sub, p_org and memorization ratio (all items and the items the base knows) of the runs
  that evaluated it (:mod:`demos.real.nq_swap`), "not run" rows for the others; then the targets per seed
  (:func:`demos.real.report.check_targets`, on the arm the runs checked; "not run" where a run did not evaluate
  or train what a target needs), the wall time and each stage's time range over the runs;
- ``frontier.png``: every arm of every run against its own seed's base, the paired SC2W as a share of the base's
  against the change in correct-context accuracy (held-out items), in ``unknown_correct_accuracy`` (held-out items)
  and in correct-context accuracy (held-out relation), three panels, the targets' corner shaded
  and an arrow from each seed's SCOPE to its SCOPE+GRPO (the lever GRPO pulls); ``--extra`` runs (other settings,
  e.g. another knowledge estimate or GRPO's prompt rows) are drawn as hollow points labelled ``LABEL`` (only the
  ``--extra-arms``, default SCOPE+GRPO), with a dotted arrow to the same seed's tabled run (that lever's move);
- ``frontier_nq_swap.png``, only when a run evaluated NQ-Swap (:func:`nq_swap_plot`; a figure of its own, as its x
  axis is no SC2W share): every arm against its own seed's base, the change in exact match on the substituted
  passage (p_sub) against the change on the original passage, the target's band shaded, the pooled changes with
  their item-bootstrap intervals;
- ``pooled_table.md`` and ``pooled.json`` (:mod:`demos.real.pooled`, unless ``--no-pooled``): the seeds pooled from
  their items (``stages/<eval|transfer|nqswap>_<arm>/item_scores.jsonl``), with bootstrap intervals stratified by
  seed and the seed-level (Student-t) interval beside them, the paired SC2W on the base's clean-correct items, the
  per-seed spread and the targets on the pooled numbers; NQ-Swap pooled over the runs that evaluated it, "not run"
  for the others (:mod:`demos.real.pooled_nq_swap`);
- with ``--evidence EVIDENCE_DIR``, the committed evidence folder (:mod:`demos.real.evidence`): ``pooled.json`` and
  each run's ``summary.json`` and ``demo.json``. ``--from-evidence EVIDENCE_DIR... --markdown`` prints the README's
  evidence table from such folders alone (no runs, no item scores), NQ-Swap's rows with it ("not run" without).

The seed table and the plot read every number from the summaries (nothing is recomputed but ratios and ranges; a
summary written before the paired SC2W shows the unpaired ratio, marked); the pooled table recomputes from the
items. Runs of two splits (``summary.json``'s ``split``, absent: test) are refused; runs of another ``provenance``
(absent: unknown), or holding stages made under another (``stage_provenance``), unless ``--allow-mixed-provenance``;
runs continued with ``reuse=config`` unless ``--allow-config-reuse``. Runs of different demos (``small`` / ``full``)
or settings are refused unless given as ``--extra`` (a settings key a run's ``demo.json`` lacks, added to the schema
after it ran, counts as its default: :func:`demos.common.with_new_keys`).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

from eval_hooks.cli_contract import end_process, run_with_contract, split_debug
from selectrust.core.errors import DataError
from selectrust.core.io import write_json_atomic
from eval_hooks.scoring.report_kit import figure, md_table, pct, save
from selectrust.conditions import CORRECT, MIST_CONDITIONS as CONDS

from ..common import with_new_keys
from . import nq_swap, pooled_nq_swap
from .arms import ARMS, sc2w_share, trained
from .arms import color as arm_color
from .arms import label as arm_label
from .decision import decide
from .decision import lines as decision_lines
from .pooled import SPLITS, check_provenance, check_split, pooled_result, pooled_table
from .report import SETS, checked_arm, check_targets, paired_sc2w, verdict, TARGETS as T, situated_faithfulness, TARGETS


def load_run(run_dir: Path) -> dict:
    """A run's ``summary.json`` with its ``demo.json`` settings (``_settings``); a ``DataError`` naming the file when
    either is missing or unreadable."""
    out = {}
    for name in ("summary.json", "demo.json"):
        path = Path(run_dir) / name
        try:
            out[name] = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise DataError(f"{path}: not a finished real-demo run ({type(e).__name__}: {e})") from None
    summary = out["summary.json"]
    record = with_new_keys(out["demo.json"], str(summary.get("demo", "real")))
    if "real" not in summary or "seed" not in summary:
        raise DataError(f"{Path(run_dir) / 'summary.json'}: no `real` or `seed` key: not a real-demo summary")
    return {**summary, "_settings": record.get("settings"), "_dir": str(run_dir)}


def _share(m: dict, base: dict) -> str:
    """SC2W as a share of the base's: the paired ratio (:func:`demos.real.arms.sc2w_share`), marked where a summary
    from before it has only the unpaired one."""
    value, what = sc2w_share(m, base)
    return "–" if value is None else f"{value:.2f}×" + ("" if what == "paired SC2W" else " (unpaired)")


def seed_rows(runs: list[dict], key: str) -> list[list[str]]:
    rows = []
    for s in sorted(runs, key=lambda r: r["seed"]):
        if key not in s:
            continue
        base = s[key]["base"]
        for arm in (a for a in ARMS if a in s[key]):
            m = s[key][arm]
            rows.append([s["seed"], arm_label(arm), *(pct(m["accuracy"][c]) for c in CONDS), pct(paired_sc2w(m)[0]),
                         _share(m, base) if trained(arm) else "–", m["n_clean_correct"],
                         pct(m.get("unknown_correct_accuracy")), pct(min(m["format_compliance"].values()))])
    return rows


def target_rows(runs: list[dict]) -> tuple[list[str], list[list[str]]]:
    checks = {s["seed"]: check_targets(s) for s in runs}
    names = list(dict.fromkeys(k for c in checks.values() for k in c))
    rows = [[seed, _wall(s), *("–" if n not in checks[seed] else verdict(checks[seed][n]) for n in names)]
            for seed, s in sorted(((s["seed"], s) for s in runs))]
    return ["seed", "wall (s)", *names], rows


def _wall(s: dict) -> str:
    """A run's wall time, or why it is not the pipeline's (a continued run reused finished stages)."""
    reused = s.get("reused_stages") or []
    return f"{s['wall_seconds']:.0f}" if not reused else f"{s['wall_seconds']:.0f} ({len(reused)} stages reused)"


def _range(vals: list[float]) -> str:
    return f"{min(vals):.0f}–{max(vals):.0f} ({len(vals)} runs)" if len(vals) > 1 else f"{vals[0]:.0f} (1 run)"


def stage_rows(runs: list[dict]) -> list[list[str]]:
    """Each stage's time range over the runs that ran it (a stage a continued run reused took no time there)."""
    stages = list(dict.fromkeys(k for s in runs for k in s.get("stage_seconds", {})))
    out = []
    for st in stages:
        vals = [s["stage_seconds"][st] for s in runs
                if st in s.get("stage_seconds", {}) and st not in (s.get("reused_stages") or [])]
        if vals:
            out.append([st, _range(vals)])
    walls = [s["wall_seconds"] for s in runs if not s.get("reused_stages")]
    if walls:
        out.append(["**whole run** (runs that reused no stage)", _range(walls)])
    return out


def seed_table(runs: list[dict], split: str = "test", provenance_note: str | None = None) -> str:
    arm = checked_arm(runs[0])
    header = ["seed", "arm", *CONDS, "paired SC2W", "paired SC2W / base", "n_clean_correct", "unknown correct",
              "min format"]
    parts = [f"Runs: {', '.join(s['_dir'] for s in runs)} ({runs[0].get('demo')}, facts set {runs[0].get('size')}, "
             f"{split} items); targets checked on {arm_label(arm)}.", ""]
    parts += [provenance_note, ""] if provenance_note else []
    for key, what in SETS.items():
        rows = seed_rows(runs, key)
        if rows:
            parts += [f"**{what[0].upper() + what[1:]}**", "", md_table(header, rows), ""]
    if any(nq_swap.KEY in s for s in runs):  # "not run" rows for the runs that did not evaluate it
        parts += ["**NQ-Swap (an outside benchmark)**", "", md_table(nq_swap.SEED_HEADER, nq_swap.seed_rows(runs)), ""]
    else:
        parts += ["**NQ-Swap (an outside benchmark)**: not run (no run evaluated it).", ""]
    header, rows = target_rows(runs)
    parts += ["**Targets per seed**", "", md_table(header, rows), "",
              "**Stage times (seconds, min–max over the runs)**", "", md_table(["stage", "seconds"], stage_rows(runs)), ""]
    return "\n".join(parts)


def _correct(m: dict) -> float | None:
    return m["accuracy"][CORRECT]


def _unknown_correct(m: dict) -> float | None:
    return m.get("unknown_correct_accuracy")


def _rel(m: dict, base: dict, metric=_correct) -> tuple[float, float] | None:
    """(paired SC2W / the base's, ``metric`` - the base's) of one arm (:func:`demos.real.arms.sc2w_share`), or None
    without an SC2W or the metric."""
    share = sc2w_share(m, base)[0]
    if share is None or metric(m) is None or metric(base) is None:
        return None
    return share, metric(m) - metric(base)


def _panels() -> list[tuple]:
    """(evaluation set, y metric, y label, the targets' corner: SC2W share at most, y change at least)."""
    return [("real", _correct, "correct-context accuracy", T["sc2w_ratio_max"], -T["accuracy_drop_max"]),
            ("real", _unknown_correct, "unknown_correct_accuracy", T["sc2w_ratio_max"], -T["unknown_correct_drop_max"]),
            ("transfer", _correct, "correct-context accuracy", T["transfer_sc2w_ratio_max"],
             -T["transfer_correct_drop_max"]),
            # beside SC2W, CR-DPO's situated faithfulness (issue 60): no target, so no corner shaded
            ("real", _situated_faithfulness, "situated faithfulness (SF)", 0.0, 0.0)]


def _situated_faithfulness(m: dict) -> float | None:
    return situated_faithfulness(m)


def _draw(ax, runs: list[dict], extras: list[tuple[str, dict]], extra_arms: tuple[str, ...], point) -> None:
    """Every trained arm of every run at ``point(run, arm)`` (None: not drawn), a grey arrow from the arm it continues
    (the lever it pulls); the ``extra_arms`` of ``extras`` hollow, labelled, with a dotted arrow to the same seed's
    tabled run (that lever's move)."""
    by_seed = {s["seed"]: s for s in runs}
    seen = set()
    for s in runs:
        pts = {a: point(s, a) for a in ARMS if trained(a)}
        for arm, xy in pts.items():
            if xy is not None:
                ax.scatter(*xy, color=arm_color(arm), s=30, label=None if arm in seen else arm_label(arm))
                seen.add(arm)
        for arm in pts:  # an arm that continues another: from that arm's point to its own
            source = ARMS.get(arm).continues
            if pts[arm] and source is not None and pts.get(source):
                ax.annotate("", xy=pts[arm], xytext=pts[source],
                            arrowprops={"arrowstyle": "->", "color": "#999999", "lw": 0.8})
    for label, s in extras:
        for arm in extra_arms:
            xy = point(s, arm)
            if xy is None:
                continue
            ax.scatter(*xy, facecolors="none", edgecolors=arm_color(arm), s=40)
            ax.annotate(label, xy, fontsize=6, xytext=(3, -8), textcoords="offset points")
            main = by_seed.get(s["seed"])
            to = point(main, arm) if main is not None else None
            if to is not None:  # the lever: this seed's run of other settings -> the tabled run
                ax.annotate("", xy=to, xytext=xy, arrowprops={"arrowstyle": "->", "color": arm_color(arm),
                                                              "lw": 0.8, "linestyle": ":"})


def frontier_plot(runs: list[dict], extras: list[tuple[str, dict]], out: Path,
                  extra_arms: tuple[str, ...] = ("scope_grpo",)) -> str:
    """The frontier against each seed's own base: SC2W as a share of the base's (x) and the change from the base's
    (y) in correct-context accuracy (held-out items), ``unknown_correct_accuracy`` (held-out items),
    correct-context accuracy (held-out relation) and situated faithfulness (held-out items; CR-DPO's SF, issue 60),
    every arm of every run, the targets' corner shaded; see the module docstring."""
    fig, axes = figure(20, 4.6, ncols=len(_panels()))
    for ax, (key, metric, what, x_max, y_min) in zip(axes, _panels()):
        ax.fill_between([0, x_max], y_min, 0.3, color="#55A868", alpha=0.12, label="targets")
        ax.axhline(0, color="#bbbbbb", lw=0.6)
        ax.axvline(1, color="#bbbbbb", lw=0.6)

        def point(s: dict, arm: str, key=key, metric=metric) -> tuple[float, float] | None:
            r = s.get(key) or {}
            return _rel(r[arm], r["base"], metric) if arm in r else None

        _draw(ax, runs, extras, extra_arms, point)
        ax.set_xlim(0, 1.5)
        ax.set_ylim(min(-0.6, ax.get_ylim()[0]), 0.15)
        ax.set_xlabel("paired SC2W / the base's (lower is better)")
        ax.set_ylabel(f"{what} - the base's")
        ax.set_title(f"{SETS[key]}: {what}", fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{len(runs)} seeds against their own base. Grey arrows: SCOPE -> SCOPE+GRPO; dotted: a run of "
                 "other settings (hollow) -> the tabled run of the same seed", fontsize=9)
    return save(fig, out, "frontier.png")


NQ_FRONTIER = "frontier_nq_swap.png"


def nq_swap_plot(runs: list[dict], extras: list[tuple[str, dict]], out: Path, pooled: dict | None = None,
                 extra_arms: tuple[str, ...] = ("scope_grpo",)) -> str | None:
    """NQ-Swap's frontier, ``frontier_nq_swap.png`` (its own figure: its x axis is no SC2W share): every arm of every
    run that evaluated NQ-Swap against its own seed's base, the change in exact match on the substituted passage
    (p_sub: following it) against the change on the original passage (``em_org_context``: using it), the target's
    band (EM on the original passage >= the base's - 5 points) shaded, the pooled changes (``pooled``'s ``nq_swap``)
    with their item-bootstrap intervals; arrows and ``extras`` as in :func:`frontier_plot`. None, and no file, when
    no run has NQ-Swap's two numbers."""
    point = nq_swap.change_from_base
    if not any(point(s, a) is not None for s in [*runs, *(e for _, e in extras)] for a in ARMS if trained(a)):
        return None
    fig, ax = figure(7.5, 5.2)
    ax.axhline(0, color="#bbbbbb", lw=0.6)
    ax.axvline(0, color="#bbbbbb", lw=0.6)
    _draw(ax, runs, extras, extra_arms, point)
    pooled_arms = pooled_nq_swap.pooled_arms((pooled or {}).get(nq_swap.KEY))
    for n, (arm, e) in enumerate((a, e) for a, e in pooled_arms.items() if trained(a)):
        x, y = e["minus_base"]["p_sub"], e["minus_base"]["em_org_context"]
        if x["value"] is None or y["value"] is None:
            continue
        err = [[[v["value"] - v["ci"][0]], [v["ci"][1] - v["value"]]] if v.get("ci") else None for v in (x, y)]
        ax.errorbar(x["value"], y["value"], xerr=err[0], yerr=err[1], fmt="D", color=arm_color(arm), ms=7, mec="k",
                    capsize=3, lw=1, label="pooled [item bootstrap]" if n == 0 else None)
    lo, hi = ax.get_ylim()
    lo, hi = min(lo, -0.3), max(hi, 0.1)
    ax.axhspan(-TARGETS["nq_swap_em_drop_max"], hi, color="#55A868", alpha=0.12, label="target (EM orig.)")
    ax.set_ylim(lo, hi)
    ax.set_xlabel("p_sub - the base's: EM on the substituted passage (following it; lower = resisting more)")
    ax.set_ylabel("EM on the original passage - the base's (using it)")
    seeds = sorted(s["seed"] for s in runs if nq_swap.KEY in s)
    ax.set_title(f"NQ-Swap against each seed's own base (seeds {', '.join(map(str, seeds)) or 'none'}; "
                 "not run on " + (", ".join(str(s["seed"]) for s in runs if nq_swap.KEY not in s) or "none") + ")",
                 fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
    return save(fig, out, NQ_FRONTIER)


def _without(settings: dict | None, keys: tuple[str, ...]) -> dict | None:
    """``settings`` (a run's demo.json ``settings``) without the dotted ``keys`` (e.g. ``real.scope``)."""
    if settings is None:
        return None
    out = copy.deepcopy(settings)
    for key in keys:
        *path, last = key.split(".")
        node = out
        for p in path:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    return out


def check_same_settings(runs: list[dict], vary: tuple[str, ...] = ()) -> None:
    """A DataError naming the run whose demo, facts set or settings differ from the first run's, but for the settings
    keys in ``vary`` (``--vary``: e.g. ``real.scope``, an arm switched on in some seeds only; each arm is pooled over
    the runs that evaluated it in every seed given, so pool those runs apart for that arm)."""
    first = runs[0]
    for s in runs[1:]:
        for k in ("demo", "size"):
            if s.get(k) != first.get(k):
                raise DataError(f"{s['_dir']}: {k}={s.get(k)!r} but {first['_dir']} has {first.get(k)!r}: "
                                 "give runs of other settings as --extra LABEL=RUN_DIR")
        if _without(s["_settings"], vary) != _without(first["_settings"], vary):
            raise DataError(f"{s['_dir']}/demo.json: settings differ from {first['_dir']}'s: give runs of "
                             "other settings as --extra LABEL=RUN_DIR (or the keys that may differ as --vary)")
    seeds = [s["seed"] for s in runs]
    if len(set(seeds)) != len(seeds):
        raise DataError(f"two runs of the same seed: {seeds}")


def add_vary_argument(ap: argparse.ArgumentParser) -> None:
    """``--vary KEY`` (repeatable) for the commands that pool runs (:func:`check_same_settings`'s ``vary``)."""
    ap.add_argument("--vary", action="append", default=[], metavar="KEY",
                    help="a settings key the runs may differ in (e.g. real.scope: an arm on in some seeds only; "
                         "real.nq_swap_questions: NQ-Swap on some): every other setting must match. An arm is pooled "
                         "over the runs only where every run evaluated it (so pool the seeds that ran it apart)")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m demos.real.seeds", description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", type=Path, help="real-demo out dirs of the same settings, one per seed")
    ap.add_argument("--out", type=Path, default=None, help="where seed_table.md and frontier.png go (required with "
                                                           "runs)")
    ap.add_argument("--evidence", type=Path, default=None, metavar="DIR",
                    help="also write the evidence folder DIR (e.g. docs/evidence/<name>): pooled.json and each run's "
                         "summary.json and demo.json (demos.real.evidence)")
    ap.add_argument("--second-relation", type=Path, action="append", default=[], metavar="FILE",
                    help="with --evidence: also commit this second_relation.json (python -m "
                         "demos.real.second_relation's, of the same runs) into the folder; --from-evidence prints "
                         "its table after the others")
    ap.add_argument("--from-evidence", type=Path, nargs="+", default=None, metavar="DIR",
                    help="read no runs: print the README's evidence table of each evidence folder (its pooled.json) "
                         "with --markdown")
    ap.add_argument("--markdown", action="store_true", help="with --from-evidence: print the table as markdown")
    ap.add_argument("--extra", action="append", default=[], metavar="LABEL=RUN_DIR",
                    help="a run of other settings, drawn as hollow points labelled LABEL, with a dotted arrow to "
                         "the same seed's tabled run")
    add_vary_argument(ap)
    ap.add_argument("--extra-arms", nargs="+", default=["scope_grpo"], metavar="ARM",
                    help="the arms drawn for --extra runs (default: scope_grpo, the arm the settings tried change)")
    ap.add_argument("--split", choices=SPLITS, default=None,
                    help="the split the runs must have evaluated (summary.json's `split`; absent: test); default: "
                         "the first run's. Dev and test runs are never pooled")
    ap.add_argument("--allow-mixed-provenance", action="store_true",
                    help="pool runs whose summary.json `provenance` differs or is missing, or some of whose stages "
                         "ran under another provenance (`stage_provenance`; said in the tables)")
    ap.add_argument("--allow-config-reuse", action="store_true",
                    help="pool runs continued with reuse=config (summary.json `reuse: config`: stages reused "
                         "whatever code, precision or machine made them; said in the tables)")
    ap.add_argument("--arm", default=None, help="the arm the pooled targets are checked on (default: the runs' "
                                                 "checked arm, demos.real.report.checked_arm)")
    ap.add_argument("--n-boot", type=int, default=2000, help="bootstrap replicates of the pooled intervals")
    ap.add_argument("--boot-seed", type=int, default=0, help="the pooled bootstrap's RNG seed")
    ap.add_argument("--no-pooled", action="store_true",
                    help="skip pooled_table.md and pooled.json (runs whose stages' item_scores.jsonl are gone)")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    if args.from_evidence is not None:
        if args.runs or not args.markdown:
            ap.error("--from-evidence DIR... --markdown prints the evidence tables; it takes no run dirs")
        from .evidence import evidence_tables

        print(evidence_tables(args.from_evidence), end="")
        return 0
    if not args.runs or args.out is None:
        ap.error("give the run dirs and --out DIR (or --from-evidence DIR... --markdown)")
    if args.evidence is not None and args.no_pooled:
        ap.error("--evidence needs the pooled result (drop --no-pooled)")
    if args.second_relation and args.evidence is None:
        ap.error("--second-relation FILE goes into an evidence folder: give --evidence DIR")
    extras = []
    for spec in args.extra:
        label, sep, path = spec.rpartition("=")
        if not sep or not label or not path:
            ap.error(f"--extra {spec!r}: expected LABEL=RUN_DIR")
        extras.append((label, load_run(Path(path))))
    bad = [a for a in (*args.extra_arms, *([args.arm] if args.arm else [])) if a not in ARMS]
    if bad:
        ap.error(f"--extra-arms/--arm: {bad} are not arms ({', '.join(ARMS)})")
    if args.n_boot < 1:
        ap.error(f"--n-boot must be >= 1, got {args.n_boot}")
    runs = [load_run(d) for d in args.runs]
    check_same_settings(runs, tuple(args.vary))
    split = check_split(runs, args.split)
    note = check_provenance(runs, args.allow_mixed_provenance, args.allow_config_reuse)
    pooled = None if args.no_pooled else pooled_result(  # every item file read before anything is written
        runs, args.arm or checked_arm(runs[0]), split=split, provenance_note=note, n_boot=args.n_boot,
        boot_seed=args.boot_seed)
    if pooled is not None:  # issue 60: each target on its one-sided 95% bound (docs/real_model.md#the-decision-rule)
        pooled["decision"] = decide(runs, pooled["checked_arm"], n_boot=args.n_boot, boot_seed=args.boot_seed)
    from .evidence import add_second_relation, read_second_relation, write_evidence

    # checked against the pooled runs before anything is written
    relations = [read_second_relation(f, pooled) for f in args.second_relation]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "seed_table.md").write_text(seed_table(runs, split, note))
    frontier_plot(runs, extras, args.out, tuple(args.extra_arms))
    wrote = ["seed_table.md", "frontier.png"]
    (args.out / NQ_FRONTIER).unlink(missing_ok=True)  # an earlier write's, of runs that had NQ-Swap
    if nq_swap_plot(runs, extras, args.out, pooled, tuple(args.extra_arms)):
        wrote.append(NQ_FRONTIER)
    if pooled is not None:
        write_json_atomic(args.out / "pooled.json", pooled)
        (args.out / "pooled_table.md").write_text(pooled_table(pooled, decision_lines(pooled["decision"])))
        wrote += ["pooled_table.md", "pooled.json"]
    if args.evidence is not None:
        files = write_evidence(args.evidence, runs, pooled)
        for result in relations:
            files += add_second_relation(args.evidence, result)
        print(f"wrote the evidence folder {args.evidence} ({len(files)} files)")
    print(f"wrote {', '.join(str(args.out / w) for w in wrote)} ({len(runs)} runs, {split} items)")
    return 0


if __name__ == "__main__":  # the contract of every entry point: bad runs one line, exit 2; stops one line
    _debug, _argv = split_debug(sys.argv[1:])
    end_process(run_with_contract(lambda: main(_argv), debug=_debug))
