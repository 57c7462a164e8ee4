"""The seed table's pooled evidence (demos/real/pooled.py, ``python -m demos.real.seeds``): item-level bootstrap
intervals stratified by seed, the paired SC2W, the per-seed spread, the targets, and the runs it refuses to pool,
on tiny fake run dirs."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from test_real_demo import CONDS, _summary

# One row per item: correctness under (clean, misleading, correct, irrelevant), and whether the base's estimate
# labels it unknown. Seed 0's arm repairs two of the base's switches (i0, i2), breaks one (i1) and loses its only
# unknown item under the correct context; seed 1's arm answers like the base.
BASE = [(1, 0, 1, 1), (1, 1, 1, 1), (1, 0, 1, 1), (0, 0, 1, 0)]
UNKNOWN = [False, False, False, True]
ARM_SEED0 = [(1, 1, 1, 1), (1, 0, 1, 1), (1, 1, 1, 1), (0, 0, 0, 0)]


def _rows(matrix, unknown, prefix="i") -> list[dict]:
    return [{"item_id": f"{prefix}{n}", "condition": c, "gold": f"G{n}", "correct": bool(ok),
             "knowledge": "unknown" if unk else "known", "parse_ok": True}
            for n, (vals, unk) in enumerate(zip(matrix, unknown)) for c, ok in zip(CONDS, vals)]


def _run(tmp_path, seed: int, arms: dict, *, unknown=UNKNOWN, transfer: dict | None = None, **edits):
    """A finished run dir: summary.json (the fake summary's numbers; base, SCOPE and SCOPE+GRPO), demo.json and every
    arm's ``stages/eval_<arm>/item_scores.jsonl`` (``dev_eval_<arm>`` with ``split="dev"``; ``arms``: arm -> correctness rows; ``transfer`` likewise)."""
    s = copy.deepcopy(_summary())
    for gone in ("misleading_only", "knowledge_aware"):
        del s["real"][gone]
    del s["transfer"], s["nq_swap"]  # NQ-Swap's pooling: tests/demos/test_real_nq_swap.py
    s.update({"seed": seed, "provenance": {"precision": "fp32", "torch_threads": 2, "commit": "abc"}, **edits})
    if transfer:
        s["transfer"] = {a: copy.deepcopy(s["real"][a]) for a in transfer}
    d = tmp_path / f"s{seed}"
    from demos.real.prompts import EVAL_SETS  # a dev run's evaluations are the stages dev_eval_*, dev_transfer_*

    names = EVAL_SETS[s.get("split", "test")]
    for prefix, by_arm in ((names["real"][0], arms), (names["transfer"][0], transfer or {})):
        for arm, matrix in by_arm.items():
            (d / "stages" / f"{prefix}_{arm}").mkdir(parents=True)
            (d / "stages" / f"{prefix}_{arm}" / "item_scores.jsonl").write_text(
                "".join(json.dumps(r) + "\n" for r in _rows(matrix, unknown)))
    (d / "summary.json").write_text(json.dumps({k: v for k, v in s.items() if v is not None}))
    (d / "demo.json").write_text(json.dumps({"demo": "real", "seed": seed, "settings": {"real": {"k": 1}}}))
    return d


def _two_seeds(tmp_path, **edits):
    return [_run(tmp_path, 0, {"base": BASE, "scope": BASE, "scope_grpo": ARM_SEED0}, **edits),
            _run(tmp_path, 1, {"base": BASE, "scope": ARM_SEED0, "scope_grpo": BASE}, **edits)]


def _pooled(dirs, arm="scope_grpo", n_boot=300, boot_seed=0):
    from demos.real.pooled import pooled_result
    from demos.real.seeds import load_run

    return pooled_result([load_run(d) for d in dirs], arm, split="test", n_boot=n_boot, boot_seed=boot_seed)


def test_pooled_numbers_and_the_paired_sc2w_are_counted_from_the_items(tmp_path):
    res = _pooled(_two_seeds(tmp_path))
    a = res["sets"]["real"]["scope_grpo"]
    assert a["n_items"] == 8 and a["n_unknown"] == 2
    assert a["correct"]["value"] == pytest.approx(7 / 8) and a["minus_base"]["correct"]["value"] == pytest.approx(-1 / 8)
    assert a["unknown_correct_accuracy"]["value"] == 0.5
    assert a["minus_base"]["unknown_correct_accuracy"]["value"] == -0.5
    # SC2W on each arm's own clean-correct items: (1 + 2) / (3 + 3); the base's (2 + 2) / 6
    assert a["sc2w"]["value"] == 0.5 and a["minus_base"]["sc2w"]["value"] == pytest.approx(0.5 - 4 / 6)
    # paired, on the base's 6 clean-correct items: seed 0 loses i1, gains i0 and i2; seed 1 keeps i1, both switch
    # on i0 and i2
    p = a["paired"]
    assert {k: p[k] for k in ("paired_n", "kept", "lost", "gained", "still_switched")} == {
        "paired_n": 6, "kept": 1, "lost": 1, "gained": 2, "still_switched": 2}
    assert p["paired_sc2w"]["value"] == 0.5 and p["base_paired_sc2w"]["value"] == pytest.approx(4 / 6)
    assert p["paired_ratio"]["value"] == pytest.approx(0.75)
    for ci, v in ((p["paired_ratio"]["ci"], 0.75), (a["minus_base"]["correct"]["ci"], -1 / 8)):
        assert ci[0] <= v <= ci[1] and ci[0] < ci[1]
    # per seed: seed 0 is the worst in correct-context accuracy and in the paired ratio (1/3 / 2/3 against 1.0)
    ps = a["per_seed"]
    assert {k: v for k, v in ps["correct"].items() if k != "seed_ci"} == {
        "by_seed": {0: -0.25, 1: 0.0}, "min": -0.25, "max": 0.0, "worst_seed": 0, "mean": -0.125}
    # the seed-level interval: mean -0.125, sd 0.25 / sqrt(2), t(0.975, 1 df) = 12.706: -0.125 +- 12.706 * 0.125
    assert ps["correct"]["seed_ci"] == pytest.approx([-0.125 - 12.7062 * 0.125, -0.125 + 12.7062 * 0.125], abs=1e-4)
    assert ps["paired_ratio"]["by_seed"] == {0: 0.5, 1: 1.0} and ps["paired_ratio"]["worst_seed"] == 1
    assert res["sets"]["real"]["base"]["paired"]["paired_ratio"]["value"] == 1.0


def test_gained_is_repair_analysis_repaired_and_lost_its_newly_broken(tmp_path):
    from eval_hooks.families.mist.metrics import repair_analysis

    rng = np.random.default_rng(3)
    base = [tuple(int(x) for x in rng.integers(0, 2, 4)) for _ in range(40)]
    new = [tuple(int(x) for x in rng.integers(0, 2, 4)) for _ in range(40)]
    unknown = [bool(x) for x in rng.integers(0, 2, 40)]
    d = _run(tmp_path, 0, {"base": base, "scope": base, "scope_grpo": new}, unknown=unknown)
    p = _pooled([d])["sets"]["real"]["scope_grpo"]["paired"]
    r = repair_analysis(_rows(base, unknown), _rows(new, unknown))
    assert p["gained"] == r["repaired"] and p["gained"] + p["still_switched"] == r["base_failures"]
    # lost: the base resisted, the arm does not (repair_analysis' newly_broken also asks the arm to be clean-correct)
    assert p["lost"] >= r["newly_broken"]
    assert p["paired_n"] == sum(b[0] for b in base)


def test_the_bootstrap_is_stratified_by_seed_seeded_and_paired(tmp_path):
    ones, zeros = [(1, 1, 1, 1)] * 5, [(1, 1, 0, 1)] * 5
    dirs = [_run(tmp_path, 0, {"base": ones, "scope": ones, "scope_grpo": ones}, unknown=[False] * 5),
            _run(tmp_path, 1, {"base": zeros, "scope": zeros, "scope_grpo": zeros}, unknown=[False] * 5)]
    a = _pooled(dirs)["sets"]["real"]["scope_grpo"]
    # every replicate draws 5 items of each seed: the pooled correct-context accuracy is 0.5 in every one
    assert a["correct"]["ci"] == [0.5, 0.5]
    assert a["minus_base"]["correct"]["ci"] == [0.0, 0.0]  # the arm and the base on the same resampled items
    two = _two_seeds(tmp_path / "b")
    assert _pooled(two) == _pooled(two)  # a fixed RNG seed


def test_targets_on_the_pooled_numbers_and_on_every_seed(tmp_path):
    res = _pooled(_two_seeds(tmp_path))
    not_run = [k for k, ok in res["targets"].items() if ok is None]  # no held-out relation, NQ-Swap, misleading-only
    assert not_run == ["SCOPE+GRPO on the held-out relation: paired SC2W <= 0.7 x base (pooled)",
                       "SCOPE+GRPO on the held-out relation: correct accuracy >= base - 0.05 (pooled)",
                       "SCOPE+GRPO NQ-Swap correct-context exact match >= base - 0.05 (pooled)",
                       "misleading-only correct-context accuracy < SCOPE+GRPO's (pooled)"]
    missed = [k for k, ok in res["targets"].items() if ok is False]
    assert missed == ["SCOPE+GRPO paired SC2W <= 0.5 x base (pooled)",
                      "SCOPE+GRPO correct accuracy >= base - 0.03 (pooled)",
                      "SCOPE+GRPO unknown_correct_accuracy >= base - 0.05 (pooled)",
                      "SCOPE+GRPO correct >= base - 0.06 on every seed",
                      "SCOPE+GRPO unknown_correct_accuracy >= base - 0.10 on every seed"]
    good = [(1, 1, 1, 1), (1, 1, 1, 1), (1, 1, 1, 1), (0, 0, 1, 0)]  # resists everywhere, keeps every context use
    dirs = [_run(tmp_path / "g", s, {"base": BASE, "scope": BASE, "scope_grpo": good},
                 transfer={"base": BASE, "scope_grpo": good}) for s in (0, 1)]
    res = _pooled(dirs)
    assert [k for k, ok in res["targets"].items() if not ok] == [
        "SCOPE+GRPO NQ-Swap correct-context exact match >= base - 0.05 (pooled)",
        "misleading-only correct-context accuracy < SCOPE+GRPO's (pooled)"]  # not run: not met
    assert "SCOPE+GRPO on the held-out relation: paired SC2W <= 0.7 x base (pooled)" in res["targets"]
    assert set(res["sets"]) == {"real", "transfer"} and set(res["sets"]["transfer"]) == {"base", "scope_grpo"}


def test_the_cli_writes_the_pooled_table_and_refuses_mixed_splits_and_provenance(tmp_path, capsys):
    from demos.real.seeds import main
    from selectrust.core.errors import DataError

    dirs = _two_seeds(tmp_path)
    main([*map(str, dirs), "--out", str(tmp_path / "out"), "--n-boot", "200"])
    out = tmp_path / "out"
    table = (out / "pooled_table.md").read_text()
    assert table.startswith("Pooled over seeds 0, 1 (test items)") and "200 replicates" in table
    assert "| SCOPE+GRPO | 6 | 1 | 1 | 2 | 2 | 50.0% [" in table and "| 66.7% | 0.75× [" in table
    assert "- SCOPE+GRPO correct >= base - 0.06 on every seed: **missed**" in table
    pooled = json.loads((out / "pooled.json").read_text())
    assert pooled["n_boot"] == 200 and pooled["provenance"]["precision"] == "fp32"
    assert "Provenance: precision fp32; torch_threads 2; commit abc." in table
    assert "- SCOPE+GRPO on the held-out relation: correct accuracy >= base - 0.05 (pooled): not run" in table
    assert "| SCOPE+GRPO | correct | −12.5" not in table and "| SCOPE+GRPO | correct | -12.5 pp [" in table
    assert "| -12.5 pp [-171.3 pp, +146.3 pp] | -25.0 pp | +0.0 pp | 0 |" in table  # seed mean [t interval]
    assert "facts set small, test items)" in (out / "seed_table.md").read_text()

    dev = _run(tmp_path / "d", 2, {"base": BASE, "scope": BASE, "scope_grpo": BASE}, split="dev")
    with pytest.raises(DataError, match=r"s2/summary.json.*split 'dev', but the table pools 'test' runs"):
        main([*map(str, dirs), str(dev), "--out", str(tmp_path / "o2")])
    with pytest.raises(DataError, match=r"split 'test', but the table pools 'dev' runs"):
        main([*map(str, dirs), "--out", str(tmp_path / "o2"), "--split", "dev"])
    main([str(dev), "--out", str(tmp_path / "o3"), "--split", "dev", "--n-boot", "50"])
    assert "(dev items)" in (tmp_path / "o3" / "pooled_table.md").read_text()

    bf16 = _run(tmp_path / "p", 3, {"base": BASE, "scope": BASE, "scope_grpo": BASE},
                provenance={"precision": "bf16", "torch_threads": 2, "commit": "abc"})
    unknown = _run(tmp_path / "u", 4, {"base": BASE, "scope": BASE, "scope_grpo": BASE}, provenance=None)
    with pytest.raises(DataError, match=r"s3/summary.json.*provenance precision differs"):
        main([*map(str, dirs), str(bf16), "--out", str(tmp_path / "o4")])
    with pytest.raises(DataError, match=r"s4/summary.json.*has no `provenance` \(unknown\)"):
        main([*map(str, dirs), str(unknown), "--out", str(tmp_path / "o4")])
    assert not (tmp_path / "o4").exists()  # refused before anything is written
    main([*map(str, dirs), str(bf16), str(unknown), "--out", str(tmp_path / "o5"), "--n-boot", "50",
          "--allow-mixed-provenance"])
    for name in ("pooled_table.md", "seed_table.md"):
        assert "**Mixed provenance, pooled with --allow-mixed-provenance**" in (tmp_path / "o5" / name).read_text()

    (dirs[1] / "stages" / "eval_scope_grpo" / "item_scores.jsonl").unlink()
    with pytest.raises(DataError, match=r"s1/stages/eval_scope_grpo/item_scores.jsonl: file does not exist"):
        main([*map(str, dirs), "--out", str(tmp_path / "o6")])
    main([*map(str, dirs), "--out", str(tmp_path / "o6"), "--no-pooled"])
    assert not (tmp_path / "o6" / "pooled.json").exists() and (tmp_path / "o6" / "seed_table.md").exists()


def test_the_pool_refuses_config_reuse_and_stages_of_another_provenance_unless_told(tmp_path):
    """Issue 54: a run continued with ``reuse: config`` and a run whose stages ran under another provenance than the
    run (``stage_provenance``: e.g. adapters trained on another CPU) are refused, each with its own flag."""
    from demos.real.seeds import main
    from selectrust.core.errors import DataError

    arms = {"base": BASE, "scope": BASE, "scope_grpo": ARM_SEED0}
    clean = _run(tmp_path, 0, arms)
    config = _run(tmp_path, 1, arms, reuse="config")
    moved = _run(tmp_path, 2, arms, stage_provenance={"scope": {"cpu": {"model": "EPYC", "flags": ["avx2"]}}})
    with pytest.raises(DataError, match=r"s1/summary.json.*reuse: config"):
        main([str(clean), str(config), "--out", str(tmp_path / "o1")])
    main([str(clean), str(config), "--out", str(tmp_path / "o1"), "--n-boot", "20", "--allow-config-reuse"])
    assert "**Reused by config only, pooled with --allow-config-reuse**" in (tmp_path / "o1" / "pooled_table.md").read_text()
    with pytest.raises(DataError, match=r"s2/summary.json.*stage\(s\) scope \(cpu\) ran under another provenance"):
        main([str(clean), str(moved), "--out", str(tmp_path / "o2")])
    with pytest.raises(DataError, match=r"stage\(s\) scope \(cpu\)"):  # alone too: its own stages differ
        main([str(moved), "--out", str(tmp_path / "o2")])
    main([str(clean), str(moved), "--out", str(tmp_path / "o2"), "--n-boot", "20", "--allow-mixed-provenance"])
    assert "**Mixed provenance" in (tmp_path / "o2" / "pooled_table.md").read_text()
    cpu = _run(tmp_path / "c", 3, arms, provenance={"precision": "fp32", "torch_threads": 2, "commit": "abc",
                                                    "cpu": {"model": "Xeon", "flags": ["amx_bf16", "avx2"]}})
    with pytest.raises(DataError, match=r"provenance cpu differs"):
        main([str(clean), str(cpu), "--out", str(tmp_path / "o3")])


def test_runs_with_other_arms_pool_when_the_stages_they_share_agree_on_precision(tmp_path):
    """Runs pooled with ``--vary real.<arm>`` made different stages (an arm, NQ-Swap, in one run only): their
    ``stage_precision`` maps differ in keys, which is no difference of provenance; a stage both made in another
    precision is (issue 61's ten test seeds: seeds 0-4 with SCOPE, seed 5 with NQ-Swap)."""
    from demos.real.pooled import check_provenance, same_provenance
    from demos.real.seeds import load_run
    from selectrust.core.errors import DataError

    common = {"precision": "fp32", "torch_threads": 2, "commit": "abc"}
    with_scope = {**common, "stage_precision": {"eval_base": "fp32", "scope": "fp32"}}
    with_nq = {**common, "stage_precision": {"eval_base": "fp32", "nqswap_base": "fp32"}}
    bf16 = {**common, "stage_precision": {"eval_base": "bf16", "nqswap_base": "fp32"}}
    assert same_provenance(with_scope, with_nq) and not same_provenance(with_scope, bf16)
    assert not same_provenance(with_scope, {**with_nq, "torch_threads": 1}) and not same_provenance(with_scope, None)
    arms = {"base": BASE, "scope_grpo": ARM_SEED0}
    runs = [load_run(_run(tmp_path / "a", 0, arms, provenance=with_scope)),
            load_run(_run(tmp_path / "b", 1, arms, provenance=with_nq))]
    assert check_provenance(runs) is None
    runs.append(load_run(_run(tmp_path / "c", 2, arms, provenance=bf16)))
    with pytest.raises(DataError, match=r"s2/summary.json, field 'provenance': provenance stage_precision differs"):
        check_provenance(runs)


def test_the_evidence_folder_and_the_one_command_that_prints_the_readme_table(tmp_path, capsys):
    """``--evidence DIR`` writes pooled.json and each run's summary.json and demo.json; ``--from-evidence DIR
    --markdown`` prints the README's table from those files alone (the runs' item scores deleted), with the item
    bootstrap and the seed-level interval beside each number, each seed's own change in a per-seed table, and the
    held-out relation "not run" when it was not."""
    import shutil

    from demos.real.seeds import main
    from selectrust.core.errors import DataError

    dirs = _two_seeds(tmp_path)
    ev = tmp_path / "docs" / "evidence" / "test_s01"
    main([*map(str, dirs), "--out", str(tmp_path / "out"), "--n-boot", "200", "--evidence", str(ev)])
    assert sorted(str(p.relative_to(ev)) for p in ev.rglob("*.json")) == [
        "MANIFEST.json", "pooled.json", "seed0/demo.json", "seed0/summary.json", "seed1/demo.json",
        "seed1/summary.json"]
    assert json.loads((ev / "pooled.json").read_text()) == json.loads((tmp_path / "out" / "pooled.json").read_text())
    # issue 60: each run's per-item scores, gzipped, byte-stable (the same scores give the same bytes)
    gz = sorted(str(p.relative_to(ev)) for p in ev.rglob("*.gz"))
    assert gz == [f"seed{s}/stages/eval_{a}/item_scores.jsonl.gz" for s in (0, 1) for a in ("base", "scope",
                                                                                             "scope_grpo")]
    first = (ev / gz[0]).read_bytes()
    main([*map(str, dirs), "--out", str(tmp_path / "out_again"), "--n-boot", "200", "--evidence", str(ev)])
    assert (ev / gz[0]).read_bytes() == first
    for d in dirs:
        shutil.rmtree(d)  # the table needs only the evidence folder
    # ... and the item intervals regenerate from the committed files alone
    from demos.real.evidence import unpack_runs
    from demos.real.pooled import pooled_result
    from demos.real.seeds import load_run

    from demos.real.decision import decide

    unpacked = [load_run(d) for d in unpack_runs(ev, tmp_path / "unpacked")]
    again = pooled_result(unpacked, "scope_grpo", split="test", n_boot=200, boot_seed=0)
    again["decision"] = decide(unpacked, "scope_grpo", n_boot=200, boot_seed=0)
    committed = json.loads((ev / "pooled.json").read_text())
    for key in ("sets", "decision", "targets"):
        assert json.loads(json.dumps(again[key])) == committed[key], key
    capsys.readouterr()
    assert main(["--from-evidence", str(ev), "--markdown"]) == 0
    table = capsys.readouterr().out
    pooled = json.loads((ev / "pooled.json").read_text())
    a = pooled["sets"]["real"]["scope_grpo"]
    lo, hi = a["minus_base"]["correct"]["ci"]
    slo, shi = a["per_seed"]["correct"]["seed_ci"]
    cell = f"−12.5 [{100 * lo:+.1f}, {100 * hi:+.1f}]; seeds [{100 * slo:+.1f}, {100 * shi:+.1f}]".replace("-", "−")
    row = next(line for line in table.splitlines() if line.startswith("| **SCOPE+GRPO** (targets checked) |"))
    assert row.split(" | ")[1] == cell, row
    assert row.endswith(" | 0.75× [" + ", ".join(f"{x:.2f}×" for x in a["paired"]["paired_ratio"]["ci"]) + "]; seeds ["
                        + ", ".join(f"{x:.2f}×" for x in a["per_seed"]["paired_ratio"]["seed_ci"]) + "] |")
    by_seed = a["per_seed"]["correct"]["by_seed"]
    assert by_seed["0"] != by_seed["1"]  # the per-seed table shows each seed's own change, not the pooled one
    assert "| SCOPE+GRPO | correct-context | " + " | ".join(
        f"{100 * by_seed[s]:+.1f}".replace("-", "−") for s in ("0", "1")) + " |" in table.splitlines()
    ratios = a["per_seed"]["paired_ratio"]["by_seed"]
    assert "| SCOPE+GRPO | paired SC2W / base | " + " | ".join(f"{ratios[s]:.2f}×" for s in ("0", "1")) + " |" in (
        table.splitlines())
    assert table.startswith("Pooled over seeds 0, 1 (test items; real, small facts)")
    assert "**Held-out relation**: not run." in table
    assert "- SCOPE+GRPO paired SC2W <= 0.5 x base (pooled): **missed**" in table
    assert "- misleading-only correct-context accuracy < SCOPE+GRPO's (pooled): not run" in table
    assert "| target | point | one-sided 95% bound (decides) | seed t-bound | holds |" in table  # the decision rule
    with pytest.raises(DataError, match=r"nowhere/pooled.json: not an evidence folder"):
        main(["--from-evidence", str(tmp_path / "nowhere"), "--markdown"])
    with pytest.raises(SystemExit):
        main(["--from-evidence", str(ev)])  # the table is markdown: asked for by name


def test_a_second_relation_is_committed_beside_the_runs_it_evaluated_and_printed_again(tmp_path, capsys):
    """``--evidence DIR --second-relation FILE`` commits a second held-out relation's pooled result (of the same
    seeds and split) into the folder, recorded in its manifest; ``--from-evidence`` prints its table, regenerated from
    the json, after the folder's own; a result of other seeds is refused before anything is written."""
    from demos.real.evidence import SECOND_RELATION
    from demos.real.second_relation import pooled, table
    from demos.real.seeds import main
    from selectrust.core.errors import DataError

    dirs = _two_seeds(tmp_path)
    entries = []
    for seed, d in zip((0, 1), dirs):  # the relation's item scores: the base's rows again, SCOPE unchanged
        for arm in ("base", "scope"):
            stage = d / "stages" / f"second_currency_{arm}"
            stage.mkdir(parents=True)
            (stage / "item_scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows(BASE, UNKNOWN)))
        entries.append({"dir": str(d), "seed": seed, "arms": ["scope"]})
    result = pooled(entries, "currency", "test", 100, n_boot=50)
    good = tmp_path / "second_relation.json"
    good.write_text(json.dumps(result))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**result, "seeds": [0, 7]}))
    ev = tmp_path / "ev"
    with pytest.raises(DataError, match=r"other.json, field .seeds.: its seeds \[0, 7\] are not the pooled runs' \(\[0, 1\]\)"):
        main([*map(str, dirs), "--out", str(tmp_path / "o"), "--n-boot", "50", "--evidence", str(ev),
              "--second-relation", str(other)])
    assert not ev.exists() and not (tmp_path / "o").exists()  # refused before anything was written
    with pytest.raises(SystemExit):  # it goes into an evidence folder
        main([*map(str, dirs), "--out", str(tmp_path / "o"), "--second-relation", str(good)])
    main([*map(str, dirs), "--out", str(tmp_path / "o"), "--n-boot", "50", "--evidence", str(ev),
          "--second-relation", str(good)])
    committed = ev / SECOND_RELATION.format("currency")
    assert json.loads(committed.read_text()) == json.loads(good.read_text())
    manifest = json.loads((ev / "MANIFEST.json").read_text())["files"]
    assert {"second_relation_currency.json", "second_relation_currency.md"} <= set(manifest)
    capsys.readouterr()
    assert main(["--from-evidence", str(ev), "--markdown"]) == 0
    printed = capsys.readouterr().out
    assert printed.index("**Targets (") < printed.index("**Second held-out relation: `currency`**")
    assert printed.rstrip("\n").endswith(table(result).rstrip("\n"))
    committed.write_text(json.dumps({**result, "seeds": [0, 7]}))  # edited after the fact: the manifest refuses it
    with pytest.raises(DataError, match=r"second_relation_currency.json: differs from the sha256"):
        main(["--from-evidence", str(ev), "--markdown"])


def test_the_student_t_quantiles_and_interval_behind_the_seed_level_interval():
    from eval_hooks.metrics.common import student_t_ppf, t_interval

    for df, t in ((1, 12.7062), (4, 2.7764), (9, 2.2622), (30, 2.0423)):  # the 0.975 quantiles of a t table
        assert student_t_ppf(0.975, df) == pytest.approx(t, abs=1e-4)
    assert student_t_ppf(0.025, 4) == pytest.approx(-2.7764, abs=1e-4)
    five = [-0.20, -0.05, 0.027, -0.10, 0.0]
    mean, sd = np.mean(five), np.std(five, ddof=1)
    assert t_interval(five) == pytest.approx([mean - 2.7764 * sd / 5 ** 0.5, mean + 2.7764 * sd / 5 ** 0.5], abs=1e-4)
    assert t_interval([0.1]) is None and t_interval([0.1, float("nan")]) is None
