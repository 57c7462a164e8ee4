"""split-folds and mine-forks verbs, the Taste prompt-token cap, and conf/eval/taste.yaml."""

import json
from collections import Counter

import pytest

from eval_hooks.__main__ import main
from eval_hooks.families.taste import TasteFamily, fit_prompt, omission_marker, render_taste_prompt
from tests.chat_server import ChatServer
from tests.taste_fakes import fake_reply, mining_corpus, traj


def item(i, task_id):
    return {"item_id": f"i{i}", "task_id": task_id, "task": "T", "prefix": ["s1"], "candidate_a": "x",
            "candidate_b": "y", "label": "A", "construction": "parallel", "domain": "engineering"}


def write(p, recs):
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return p


# -- folds -------------------------------------------------------------------------------------------

def test_split_folds_task_disjoint_and_even(tmp_path, capsys):
    # task sizes 4,3,3,2,1,1 (14 items): greedy largest-first gives 7 + 7
    sizes = {"a": 4, "b": 3, "c": 3, "d": 2, "e": 1, "f": 1}
    recs = [item(f"{t}{j}", t) for t, n in sizes.items() for j in range(n)]
    data = write(tmp_path / "items.jsonl", recs)
    assert main(["split-folds", "--data", str(data), "--k", "2", "--seed", "0", "--out", str(tmp_path / "f")]) == 0
    folds = [[json.loads(l) for l in (tmp_path / "f" / f"fold_{i}.jsonl").read_text().splitlines()] for i in range(2)]
    ids = [r["item_id"] for f in folds for r in f]
    assert sorted(ids) == sorted(r["item_id"] for r in recs) and len(ids) == len(set(ids))  # each item once
    tasks = [{r["task_id"] for r in f} for f in folds]
    assert not tasks[0] & tasks[1]                                                          # task-disjoint
    assert sorted(len(f) for f in folds) == [7, 7]
    for f in folds:  # whole tasks
        assert all(n == sizes[t] for t, n in Counter(r["task_id"] for r in f).items())
    assert json.loads((tmp_path / "f" / "folds.json").read_text())["sizes"] == [len(f) for f in folds]
    # deterministic per seed; another seed may place tasks differently but keeps the invariants
    main(["split-folds", "--data", str(data), "--k", "2", "--seed", "0", "--out", str(tmp_path / "g")])
    assert (tmp_path / "g" / "fold_0.jsonl").read_text() == (tmp_path / "f" / "fold_0.jsonl").read_text()


def test_split_folds_three_way_sizes(tmp_path):
    recs = [item(f"{t}{j}", t) for t in "abcdefghi" for j in range(2)]  # 9 tasks x 2 items
    data = write(tmp_path / "items.jsonl", recs)
    assert main(["split-folds", "--data", str(data), "--k", "3", "--seed", "7", "--out", str(tmp_path / "f")]) == 0
    sizes = [len((tmp_path / "f" / f"fold_{i}.jsonl").read_text().splitlines()) for i in range(3)]
    assert sizes == [6, 6, 6]


@pytest.mark.parametrize("recs, k, msg", [
    ([item(1, "a"), {**item(2, "b"), "task_id": None}], 2, "line 2, field 'task_id': missing task_id"),
    ([item(1, "a"), item(2, "a")], 2, "1 distinct task_id(s) cannot fill 2"),
    ([item(1, "a"), {**item(2, "b"), "label": "C"}], 2, "line 2, field 'label'"),
    ([item(1, "a"), item(2, "b")], 1, "need k >= 2"),
])
def test_split_folds_bad_input(tmp_path, capsys, recs, k, msg):
    data = write(tmp_path / "items.jsonl", recs)
    assert main(["split-folds", "--data", str(data), "--k", str(k), "--out", str(tmp_path / "f")]) == 2
    assert msg in capsys.readouterr().err and not (tmp_path / "f").exists()


# -- mine-forks --------------------------------------------------------------------------------------

def test_mine_forks_cli_over_chat_endpoints(tmp_path, capsys):
    """Generator and two judges behind a loopback chat server; the same funnel as the in-process fakes."""
    data = write(tmp_path / "traj.jsonl", mining_corpus())
    with ChatServer(lambda body, k: fake_reply(body["model"], body["messages"][-1]["content"])) as srv:
        rc = main(["mine-forks", "--config", "conf/mine_forks.yaml", "--trajectories", str(data),
                   "--out", str(tmp_path / "m"), f"generator.url={srv.url}", "generator.model=generator",
                   f"judges.0.url={srv.url}", "judges.0.model=j1", f"judges.1.url={srv.url}", "judges.1.model=j2",
                   "judges.0.name=j1", "judges.1.name=j2"])
    assert rc == 0, capsys.readouterr().err
    stats = json.loads((tmp_path / "m" / "mining_stats.json").read_text())
    assert stats["funnel"] == {"considered": 22, "candidates": 13, "parsed": 12, "rubric": 11, "checks": 6,
                               "trivial": 5, "released": 4}
    assert stats["judges"] == ["j1", "j2"] and stats["generator"] == "generator"
    items = [json.loads(l) for l in (tmp_path / "m" / "items.jsonl").read_text().splitlines()]
    assert len(items) == 4 and all(i["task_id"] for i in items)
    assert len((tmp_path / "m" / "candidates.jsonl").read_text().splitlines()) == 22
    report = (tmp_path / "m" / "report.md").read_text()
    assert "| **total** | 22 | 13 | 12 | 11 | 6 | 5 | 4 |" in report and "parsed: no_json_object = 1" in report
    # the mined items split into task-disjoint folds
    assert main(["split-folds", "--data", str(tmp_path / "m" / "items.jsonl"), "--k", "2",
                 "--out", str(tmp_path / "folds")]) == 0


def test_mine_forks_bad_trajectory_fails_before_models(tmp_path, capsys):
    recs = mining_corpus()
    recs[3]["steps"][2]["step_id"] = 0  # out of order
    data = write(tmp_path / "traj.jsonl", recs)
    # the generator is an hf model that does not exist: reaching it would raise something else
    rc = main(["mine-forks", "--config", "conf/mine_forks.yaml", "--trajectories", str(data), "--out",
               str(tmp_path / "m"), "generator.backend=hf", "generator.model=/nonexistent/model"])
    err = capsys.readouterr().err
    assert rc == 2 and "traj.jsonl, line 4, field 'steps[2].step_id'" in err and "out of order" in err
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("override, msg", [
    ("mining.leak_wordz=[x]", "leak_wordz"), ("mining.max_pairs_per_task=0", "max_pairs_per_task"),
    ("judges=[]", "judges is empty"), ("judges.0.backend=vllm", "judges[0].backend"),
    ("mining.seed=abc", "seed"),
])
def test_mine_forks_config_errors(tmp_path, capsys, override, msg):
    data = write(tmp_path / "traj.jsonl", [traj("t", "a", 1.0, [("user", "x")])])
    rc = main(["mine-forks", "--config", "conf/mine_forks.yaml", "--trajectories", str(data), "--out",
               str(tmp_path / "m"), override])
    assert rc == 2 and msg in capsys.readouterr().err


# -- prompt-token cap (hand-worked with a one-token-per-line counter) ------------------------------

def lines(text):
    return len(text.split("\n"))


def test_fit_prompt_keeps_head_marker_and_longest_tail():
    prefix = "\n".join(f"L{i}" for i in range(1, 101))
    base = lines(render_taste_prompt("task", "", "first", "second"))  # prompt lines besides the prefix's 1
    full, omitted = fit_prompt("task", prefix, "first", "second", max_prompt_tokens=10 ** 6, count_tokens=lines)
    assert omitted == 0 and "L50" in full
    cap = base - 1 + 25 + 1 + 10  # head 25 + marker + 10 tail lines
    p, omitted = fit_prompt("task", prefix, "first", "second", max_prompt_tokens=cap, count_tokens=lines)
    assert omitted == 65 and lines(p) == cap
    assert "L25\n" + omission_marker(65) + "\nL91\n" in p and "L26" not in p and "L90" not in p and "L100" in p
    p, omitted = fit_prompt("task", prefix, "first", "second", max_prompt_tokens=cap + 1, count_tokens=lines)
    assert omitted == 64 and "\nL90\n" in p


def test_taste_family_cap_applies_to_both_orders(tmp_path):
    rec = {**item(1, "a"), "prefix": [f"step text {i}" for i in range(60)]}
    rows = TasteFamily(max_prompt_tokens=100).expand_records([(1, rec)], "x.jsonl")  # ~4 bytes/token estimate
    assert [r["omitted_lines"] for r in rows] == [rows[0]["omitted_lines"]] * 2 and rows[0]["omitted_lines"] > 0
    assert all(r["task_id"] == "a" and "lines omitted" in r["prompt"] for r in rows)
    full = TasteFamily().expand_records([(1, rec)], "x.jsonl")
    assert full[0]["omitted_lines"] == 0 and "step text 59" in full[0]["prompt"]


def test_eval_taste_config_composes_and_caps(tmp_path):
    from recipe_utils import compose
    from trainer.eval_bridge import load_eval_rows

    rec = {**item(1, "a"), "prefix": [f"step text {i}" for i in range(60)]}
    path = write(tmp_path / "items.jsonl", [rec])
    cfg = compose("evaluate", ["eval=taste", f"eval.path={path}", "eval.max_prompt_tokens=150",
                               "eval.prompt_tokenizer=tiny"])
    assert cfg.eval.family == "taste" and cfg.eval.max_new_tokens == 4096
    rows = load_eval_rows(cfg.eval)
    assert rows[0]["omitted_lines"] > 0  # counted with the tiny byte tokenizer


@pytest.mark.slow
def test_evaluate_recipe_runs_eval_taste(tmp_path):
    from recipe_utils import ROOT, compose, load_recipe

    cfg = compose("evaluate", ["eval=taste", f"eval.path={ROOT / 'tests/data/eval/taste_small.jsonl'}",
                               f"out_dir={tmp_path / 'o'}", "eval.max_new_tokens=4"])
    m = load_recipe("evaluate").run(cfg)
    # tiny random model: whatever it writes, strict counts every item and unparsed answers are wrong
    n = m["n_items"]
    assert n == 4 and m["strict"] == m["paired_outcomes"]["CC"] / n
    scores = [json.loads(l) for l in (tmp_path / "o" / "item_scores.jsonl").read_text().splitlines()]
    assert len(scores) == 8 and all(s["parse_ok"] or not s["correct"] for s in scores)
    assert m["unparsed"]["seeded"] == sum(not s["parse_ok"] for s in scores if s["condition"] == "seeded")


@pytest.mark.slow
def test_mine_forks_with_in_process_tiny_models(tmp_path, capsys):
    """backend: hf end to end. The random tiny model writes no JSON: every candidate it was asked about is
    counted as dropped at `parsed` (no_json_object), nothing silently disappears."""
    data = write(tmp_path / "traj.jsonl", mining_corpus()[:4] + mining_corpus()[-1:])  # P1, P2, D6
    rc = main(["mine-forks", "--config", "conf/mine_forks.yaml", "--trajectories", str(data), "--out",
               str(tmp_path / "m"), "generator.backend=hf", "generator.model=tiny", "judges.0.backend=hf",
               "judges.0.model=tiny:tiny", "judges.1.backend=hf", "judges.1.model=tiny:tiny",
               "judges.1.name=judge-2b", "mining.generator_max_new_tokens=4", "mining.judge_max_new_tokens=4"])
    assert rc == 0, capsys.readouterr().err
    stats = json.loads((tmp_path / "m" / "mining_stats.json").read_text())
    assert stats["funnel"]["candidates"] == 3 and stats["funnel"]["parsed"] == 0
    assert stats["dropped"]["parsed"] == {"no_json_object": 3}
    assert (tmp_path / "m" / "items.jsonl").read_text() == ""


def test_mine_forks_reuses_recorded_replies_and_checks_cited_steps(tmp_path, capsys):
    data = write(tmp_path / "traj.jsonl", mining_corpus())
    serve = lambda body, k: fake_reply(body["model"], body["messages"][-1]["content"])  # noqa: E731
    args = ["mine-forks", "--config", "conf/mine_forks.yaml", "--trajectories", str(data)]
    with ChatServer(serve) as srv:
        urls = [f"generator.url={srv.url}", "generator.model=generator", f"judges.0.url={srv.url}",
                "judges.0.model=j1", f"judges.1.url={srv.url}", "judges.1.model=j2"]
        assert main(args + ["--out", str(tmp_path / "a")] + urls) == 0
        first = (tmp_path / "a" / "mining_stats.json").read_text()
        n_before = sum(r["model"] == "generator" for r in srv.requests)
        recorded = tmp_path / "a" / "candidates.jsonl"
        # generator pointed at a dead port: only recorded replies can make this run work
        dead = [u if not u.startswith("generator.url") else "generator.url=http://127.0.0.1:9" for u in urls]
        assert main(args + ["--out", str(tmp_path / "b"), f"generator_replies={recorded}"] + dead) == 0
        assert sum(r["model"] == "generator" for r in srv.requests) == n_before == 13
    b = json.loads((tmp_path / "b" / "mining_stats.json").read_text())
    assert b["funnel"] == json.loads(first)["funnel"] and b["recorded_replies_used"] == 13
    # a recorded detour reply citing a step the attempt does not have: file/line/field, before models
    lines = recorded.read_text().splitlines()
    i = next(k for k, l in enumerate(lines) if json.loads(l)["item_id"] == "detour/D1/d")
    rec = json.loads(lines[i])
    reply = json.loads(rec["generator_reply"])
    reply["quotes"]["success"]["step"] = 42
    rec["generator_reply"] = json.dumps(reply)
    lines[i] = json.dumps(rec)
    bad = tmp_path / "bad_replies.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    rc = main(args + ["--out", str(tmp_path / "c"), f"generator_replies={bad}", "generator.backend=hf",
                      "generator.model=/nonexistent/model"])
    err = capsys.readouterr().err
    assert rc == 2 and f"line {i + 1}, field 'generator_reply.quotes.success.step'" in err and "cites step 42" in err
    assert not (tmp_path / "c").exists()
