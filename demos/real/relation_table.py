"""The second held-out relation's table (``second_relation.md``), from its pooled result (``second_relation.json``)
alone: one home for the command that writes it (:mod:`demos.real.second_relation`) and the evidence folders that print
it again from committed files (:mod:`demos.real.evidence`), which cannot import the command (it imports the pooling
tool, which imports them)."""

from __future__ import annotations

from eval_hooks.scoring.report_kit import md_table, pp, times, with_ci
from selectrust.conditions import CLEAN, CORRECT, IRRELEVANT, MISLEADING

from .arms import BASE
from .arms import label as arm_label

ORDER = (CLEAN, CORRECT, MISLEADING, IRRELEVANT)  # the table's columns


def _target_cell(t: dict) -> str:
    fmt = times if t["statistic"] == "paired_ratio" else pp
    return f"{fmt(t['point'])} (bound {fmt(t['bound'])}): **{t['holds']}**"


def table(result: dict) -> str:
    """``second_relation.md``: the base's rates, each arm's change from the base with its interval, its paired SC2W
    ratio and the three targets."""
    rel, st = result["relation"], result["pooled"]
    b = st[BASE.name]
    head = [f"**Second held-out relation: `{rel}`** ({result['split']} items, never trained on; seeds "
            f"{', '.join(map(str, result['seeds']))}; {b['n_items']} items ({b['n_items'] // len(result['seeds'])} "
            f"per seed), {b['n_unknown']} labelled unknown by the base, pooled over the seeds). Item bootstrap "
            f"paired by item and stratified by seed, "
            f"{result['n_boot']} replicates (seed {result['boot_seed']}), 95% intervals; targets by the decision "
            f"rule: {result['rule']}.", "",
            md_table(["base", *ORDER, "SC2W", "unknown-correct"],
                     [["rate", *(with_ci(b[c]) for c in ORDER), with_ci(b["sc2w"]),
                       with_ci(b["unknown_correct_accuracy"])]]), ""]
    rows, goals = [], []
    for arm, t in result["targets"].items():
        e = st[arm]
        rows.append([arm_label(arm), *(with_ci(e["minus_base"][c], pp) for c in ORDER),
                     with_ci(e["minus_base"]["unknown_correct_accuracy"], pp),
                     with_ci(e["paired"]["paired_ratio"], times)])
        goals.append([arm_label(arm), *(_target_cell(x) for x in t)])
    names = [x["name"].split(": ", 1)[1] for x in next(iter(result["targets"].values()), [])]
    return "\n".join([*head, "**Arm - base** (points; paired SC2W as a share of the base's)", "",
                      md_table(["arm", *ORDER, "unknown-correct", "paired SC2W ratio"], rows), "",
                      "**Targets** (issue 61, as on the held-out relation; the point, its one-sided 95% bound, and "
                      "whether it holds on the bound, on the point only, or fails)", "",
                      md_table(["arm", *names], goals), ""])
