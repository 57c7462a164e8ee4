"""NQ-Swap in the seed tool (issue 52; demos/real/pooled_nq_swap.py, demos/real/seeds.py, demos/real/evidence.py):
pooled over the runs that evaluated it from their items, "not run" for the others, the NQ-Swap frontier
(``frontier_nq_swap.png``) and the README's evidence table, on run dirs whose NQ-Swap stages the nq_swap family scored
from scripted responses (tests/demos/test_real_nq_swap.py's)."""

from __future__ import annotations

import copy
import json

import pytest

from test_real_demo import _summary
from test_real_nq_swap import ARM_SAYS, BASE_SAYS, TARGET, _evaluate, _with_nq

POOLED_TARGET = f"{TARGET} (pooled)"
ROW = "| {seed} | {arm} | " + " | ".join(["not run"] * 4) + " |"  # a run without NQ-Swap, in the per-seed table


def _run(tmp_path, seed: int, says: dict[str, dict] | None) -> object:
    """A finished run dir (base, SCOPE, SCOPE+GRPO) whose NQ-Swap stages the family scored (``says``: model -> its
    scripted answers; None: the run did not evaluate NQ-Swap, as the quick demo's), its held-out items' stages those
    of tests/demos/test_real_pooled.py (every model the base)."""
    from test_real_pooled import BASE, UNKNOWN, _rows

    s = copy.deepcopy(_summary())
    for gone in ("misleading_only", "knowledge_aware"):
        del s["real"][gone]
    del s["transfer"], s["nq_swap"]
    d = tmp_path / f"s{seed}"
    for m in s["real"]:
        (d / "stages" / f"eval_{m}").mkdir(parents=True)
        (d / "stages" / f"eval_{m}" / "item_scores.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in _rows(BASE, UNKNOWN)))
    if says is not None:
        s["nq_swap"] = {m: _evaluate(d / "stages" / f"nqswap_{m}", said) for m, said in says.items()}
    s.update(seed=seed, provenance={"precision": "fp32"})
    (d / "summary.json").write_text(json.dumps(s))
    (d / "demo.json").write_text(json.dumps({"demo": "real_full", "seed": seed, "settings": {"real": {}}}))
    return d


def _two(tmp_path) -> list:
    # seed 0: SCOPE answers as the base, SCOPE+GRPO as ARM_SAYS; seed 1 the other way round
    return [_run(tmp_path, 0, {"base": BASE_SAYS, "scope": BASE_SAYS, "scope_grpo": ARM_SAYS}),
            _run(tmp_path, 1, {"base": BASE_SAYS, "scope": ARM_SAYS, "scope_grpo": BASE_SAYS})]


def test_nq_swap_is_pooled_over_seeds_from_the_items_like_the_held_out_relation(tmp_path):
    from demos.real.pooled_nq_swap import pool, pooled_lines, pooled_runs, pooled_target, seed_features
    from demos.real.seeds import load_run, seed_table

    runs = [load_run(d) for d in _two(tmp_path)]
    p = pooled_runs(runs, n_boot=300, boot_seed=0)
    assert (p["seeds"], p["not_run"]) == ([0, 1], [])
    a, b = p["arms"]["scope_grpo"], p["arms"]["base"]
    # 8 items (4 a seed): EM 5/8 against the base's 6/8; p_sub 5/8 against 6/8; p_org 2/8 against 0; MR 2 / (2 + 5)
    assert (a["n_items"], a["n_known"]) == (8, 4)
    assert a["em_org_context"]["value"] == pytest.approx(5 / 8) and b["em_org_context"]["value"] == 0.75
    assert a["p_sub"]["value"] == pytest.approx(5 / 8) and a["p_org"]["value"] == 0.25
    assert a["memorization_ratio"]["value"] == pytest.approx(2 / 7) and b["memorization_ratio"]["value"] == 0.0
    # on the items the base knows (2 a seed): the arm names the substitute on 3 of 4, the original on 1
    assert a["known_p_sub"]["value"] == 0.75 and a["known_memorization_ratio"]["value"] == 0.25
    # the change from each seed's own base, pooled (paired by item)
    diff = {k: v["value"] for k, v in a["minus_base"].items()}
    assert diff == pytest.approx({"em_org_context": -1 / 8, "p_sub": -1 / 8, "p_org": 2 / 8,
                                  "memorization_ratio": 2 / 7})
    lo, hi = a["minus_base"]["em_org_context"]["ci"]
    assert lo <= -1 / 8 <= hi and lo < hi
    # per seed: seed 0's arm (ARM_SAYS) against its base, seed 1's (the base's answers) 0
    spread = a["per_seed"]["em_org_context"]
    assert (spread["by_seed"], spread["worst_seed"], spread["mean"]) == ({0: -0.25, 1: 0.0}, 0, -0.125)
    assert spread["seed_ci"] == pytest.approx([-0.125 - 12.7062 * 0.125, -0.125 + 12.7062 * 0.125], abs=1e-4)
    org = a["per_seed"]["p_org"]  # +50 points on seed 0, 0 on seed 1; the worst seed the lowest
    assert (org["by_seed"], org["worst_seed"], org["mean"]) == ({0: 0.5, 1: 0.0}, 1, 0.25)
    assert org["seed_ci"] == pytest.approx([0.25 - 12.7062 * 0.25, 0.25 + 12.7062 * 0.25], abs=1e-4)
    assert a["per_seed"]["p_sub"]["worst_seed"] == 1  # following the substituted passage more is worse
    # the bootstrap is stratified by seed and paired: a model identical to the base differs by 0 in every replicate
    same = pool({0: {"base": seed_features(runs[0])["base"], "scope": seed_features(runs[0])["base"]}}, n_boot=50)
    assert same["scope"]["minus_base"]["em_org_context"]["ci"] == [0.0, 0.0]
    assert pooled_runs(runs, n_boot=300, boot_seed=0) == p  # seeded
    assert pooled_target(p, "scope_grpo", "SCOPE+GRPO", 0.05) == {POOLED_TARGET: False}  # -12.5 points
    assert pooled_target(p, "base", "base", 0.05) == {"base NQ-Swap correct-context exact match >= base - 0.05 "
                                                      "(pooled)": True}
    assert pooled_target(None, "scope_grpo", "SCOPE+GRPO", 0.05) == {POOLED_TARGET: None}
    text = "\n".join(pooled_lines(p, 0.95))
    assert "**NQ-Swap (an outside benchmark), pooled** (seeds 0, 1; intervals: clustered by question;" in text
    # issue 60: both seeds evaluated the same 4 questions: 4 questions (8 evaluations), resampled as 4 clusters
    assert (a["n_questions"], a["n_items"], a["interval"]) == (4, 8, "clustered by question")
    assert "EM strict (orig. passage)" in text and a["em_org_context_strict"]["value"] is not None
    assert "| SCOPE+GRPO | em_org_context | -12.5 pp [" in text and "| SCOPE+GRPO | p_org | +25.0 pp [" in text
    assert "| 0 | SCOPE+GRPO | -25.0 pp | -25.0 pp | +50.0 pp | +50.0 pp |" in text  # each seed's change
    assert "| 1 | SCOPE+GRPO | +0.0 pp | +0.0 pp | +0.0 pp | +0.0 pp |" in text and "not run" not in text
    table = seed_table(runs)
    assert "| 0 | SCOPE+GRPO | 4 | 50.0% | 50.0% | 50.0% | 50.0% | 2 | 50.0% | 50.0% |" in table


def test_an_arm_scored_on_other_items_is_refused_naming_its_file(tmp_path):
    from demos.real.pooled_nq_swap import seed_features
    from demos.real.seeds import load_run
    from selectrust.core.errors import DataError

    run = load_run(_run(tmp_path, 0, {"base": BASE_SAYS, "scope": BASE_SAYS, "scope_grpo": ARM_SAYS}))
    path = tmp_path / "s0" / "stages" / "nqswap_scope" / "item_scores.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows if r["item_id"] != rows[0]["item_id"]))  # 3 items
    with pytest.raises(DataError, match="nqswap_scope/item_scores.jsonl.*not those of nqswap_base"):
        seed_features(run)


def test_a_run_without_nq_swap_is_not_run_and_the_others_are_pooled(tmp_path):
    """Seeds 0 and 1 evaluated NQ-Swap, seed 2 did not (the main job's default): the NQ-Swap numbers are those of
    seeds 0 and 1 alone, seed 2 shows "not run" in both tables, and the facts sets pool all three."""
    from demos.real.pooled_nq_swap import pooled_runs
    from demos.real.seeds import load_run, main

    dirs = [*_two(tmp_path), _run(tmp_path, 2, None)]
    alone = pooled_runs([load_run(d) for d in dirs[:2]], n_boot=100, boot_seed=0)
    assert main([*map(str, dirs), "--out", str(tmp_path / "out"), "--n-boot", "100"]) == 0
    pooled = json.loads((tmp_path / "out" / "pooled.json").read_text())
    assert pooled["seeds"] == [0, 1, 2] and pooled["sets"]["real"]["base"]["n_items"] == 12
    nq = pooled["nq_swap"]
    assert (nq["seeds"], nq["not_run"]) == ([0, 1], [2])
    assert nq["arms"] == json.loads(json.dumps(alone["arms"]))  # the same items, the same bootstrap draws
    assert nq["arms"]["scope"]["minus_base"]["p_sub"]["value"] == pytest.approx(-1 / 8)
    assert pooled["targets"][POOLED_TARGET] is False  # on seeds 0 and 1: -12.5 points
    table = (tmp_path / "out" / "pooled_table.md").read_text()
    assert "(seeds 0, 1; **not run** on seed(s) 2 (no `nq_swap` in their summary.json)" in table
    assert ROW.format(seed=2, arm="SCOPE") in table and ROW.format(seed=2, arm="SCOPE+GRPO") in table
    assert "| 1 | SCOPE | -25.0 pp | -25.0 pp | +50.0 pp | +50.0 pp |" in table
    assert f"- {POOLED_TARGET}: **missed**" in table
    # the decision rule judges NQ-Swap's targets over the same runs (seeds 0 and 1), not "not run" for seed 2's lack
    nq_rules = [t for t in pooled["decision"]["targets"] if t["set"] == "nq_swap"]
    assert len(nq_rules) == 3 and all(t["holds"] != "not run" for t in nq_rules)
    assert all(set(t["by_seed"]) == {"0", "1"} for t in nq_rules)
    seeds = (tmp_path / "out" / "seed_table.md").read_text().split("**NQ-Swap (an outside benchmark)**")[1]
    assert "| 2 | base | " + " | ".join(["not run"] * 8) + " |" in seeds
    assert "| 1 | SCOPE | 4 | 50.0% | 50.0% | 50.0% | 50.0% | 2 | 50.0% | 50.0% |" in seeds
    assert (tmp_path / "out" / "frontier_nq_swap.png").stat().st_size > 10_000


def test_no_run_with_nq_swap_says_not_run_and_draws_no_nq_swap_frontier(tmp_path):
    from demos.real.seeds import main

    out = tmp_path / "out"
    assert main([*map(str, _two(tmp_path / "a")), "--out", str(out), "--n-boot", "20"]) == 0
    assert (out / "frontier_nq_swap.png").exists()
    dirs = [_run(tmp_path / "b", 0, None), _run(tmp_path / "b", 1, None)]
    assert main([*map(str, dirs), "--out", str(out), "--n-boot", "20"]) == 0  # the same out dir, written again
    assert not (out / "frontier_nq_swap.png").exists() and (out / "frontier.png").exists()
    pooled = json.loads((out / "pooled.json").read_text())
    assert pooled["nq_swap"] == {"seeds": [], "not_run": [0, 1], "arms": {}}
    assert pooled["targets"][POOLED_TARGET] is None
    table = (out / "pooled_table.md").read_text()
    assert "**NQ-Swap (an outside benchmark)**: not run (no run evaluated it" in table
    assert f"- {POOLED_TARGET}: not run" in table and "NQ-Swap: arm - base" not in table
    assert "**NQ-Swap (an outside benchmark)**: not run (no run evaluated it)." in (out / "seed_table.md").read_text()


def test_the_nq_swap_frontier_draws_each_arm_against_its_seed_s_base_and_the_pooled_change(tmp_path, monkeypatch):
    """Each arm at (its p_sub - the base's, its EM on the original passage - the base's) of its own seed, read from the
    summaries; the pooled changes as diamonds with their item-bootstrap intervals; nothing without NQ-Swap."""
    from matplotlib.collections import PathCollection

    from demos.real import seeds
    from demos.real.nq_swap import change_from_base
    from demos.real.pooled import pooled_result

    s = _with_nq()  # SCOPE+GRPO: p_sub 20% against the base's 35%, EM 40% against 45%
    assert change_from_base(s, "scope_grpo") == pytest.approx((-0.15, -0.05))
    assert change_from_base(s, "misleading_only") is None  # not evaluated on NQ-Swap in that run
    del s["nq_swap"]["scope"]["nq_swap"]["p_sub"]
    assert change_from_base(s, "scope") is None
    figs = []
    monkeypatch.setattr(seeds, "save", lambda fig, out, name: figs.append(fig) or name)
    runs = [seeds.load_run(d) for d in _two(tmp_path)]
    pooled = pooled_result(runs, "scope_grpo", split="test", n_boot=100)
    assert seeds.nq_swap_plot(runs, [], tmp_path, pooled) == "frontier_nq_swap.png"
    ax = figs[-1].axes[0]
    points = sorted(tuple(round(float(v), 6) for v in xy) for c in ax.collections if isinstance(c, PathCollection)
                    for xy in c.get_offsets())  # the scatter points
    # seed 0: SCOPE as the base (0, 0), SCOPE+GRPO -25 points in both; seed 1 the other way round
    assert points == [(-0.25, -0.25), (-0.25, -0.25), (0.0, 0.0), (0.0, 0.0)]
    diamonds = [(round(float(line.get_xdata()[0]), 6), round(float(line.get_ydata()[0]), 6))
                for line in ax.lines if line.get_marker() == "D"]
    assert diamonds == [(-0.125, -0.125), (-0.125, -0.125)]  # SCOPE and SCOPE+GRPO pooled over the two seeds
    no_nq = [{k: v for k, v in r.items() if k != "nq_swap"} for r in runs]
    assert seeds.nq_swap_plot(no_nq, [], tmp_path, None) is None and len(figs) == 1


def test_the_evidence_table_has_the_nq_swap_rows_or_says_not_run(tmp_path, capsys):
    """``--from-evidence DIR --markdown`` prints NQ-Swap's pooled changes from the committed pooled.json alone (the runs
    deleted), each with its item-bootstrap and seed-level interval; "not run" when no run evaluated it."""
    import shutil

    from demos.real.seeds import main

    dirs = _two(tmp_path)
    ev = tmp_path / "evidence" / "nq"
    main([*map(str, dirs), "--out", str(tmp_path / "out"), "--n-boot", "200", "--evidence", str(ev)])
    for d in dirs:
        shutil.rmtree(d)
    capsys.readouterr()
    assert main(["--from-evidence", str(ev), "--markdown"]) == 0
    table = capsys.readouterr().out
    nq = json.loads((ev / "pooled.json").read_text())["nq_swap"]["arms"]["scope_grpo"]

    def cell(key: str, value: str) -> str:
        lo, hi = nq["minus_base"][key]["ci"]
        slo, shi = nq["per_seed"][key]["seed_ci"]
        text = f"{value} [{100 * lo:+.1f}, {100 * hi:+.1f}]; seeds [{100 * slo:+.1f}, {100 * shi:+.1f}]"
        return text.replace("-", "−")

    part = table.split("**NQ-Swap (an outside benchmark)**, seeds 0, 1: 4 questions (8 evaluations over the seeds), "
                       "4 known to the base. Base: EM contained (orig. passage) 75.0%, p_sub = EM (subst. passage) "
                       "75.0%, p_org 0.0%, MR 0.0%.")[1]
    row = next(line for line in part.splitlines() if line.startswith("| **SCOPE+GRPO** (targets checked) |"))
    assert row.split(" | ")[1:] == [cell("em_org_context", "−12.5"), cell("p_sub", "−12.5"), cell("p_org", "+25.0"),
                                    cell("memorization_ratio", "+28.6") + " |"]
    assert part.index("| SCOPE |") < part.index("**Targets (SCOPE+GRPO)**")
    assert f"- {POOLED_TARGET}: **missed**" in part
    quick = [_run(tmp_path / "q", 0, None), _run(tmp_path / "q", 1, None)]
    main([*map(str, quick), "--out", str(tmp_path / "out2"), "--n-boot", "20", "--evidence", str(ev)])
    capsys.readouterr()
    main(["--from-evidence", str(ev), "--markdown"])
    table = capsys.readouterr().out
    assert "**NQ-Swap (an outside benchmark)**: not run." in table and f"- {POOLED_TARGET}: not run" in table
