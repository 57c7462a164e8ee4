"""The synthetic toy task of the demo (demos/toy/task.py): determinism, frozen files per format version,
splits, matched formats, that every file loads through the eval_hooks family loaders, and its data source."""

import hashlib
import json
import re
from pathlib import Path

import pytest

from demos.toy import task as toy

SMALL = dict(n_keys=60, n_heldout=15, n_unseen=10)


def _digest(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


def _jsonl(p: Path) -> list[dict]:
    return [json.loads(line) for line in p.read_text().splitlines()]


def _stated(prompt: str) -> str:
    """What a prompt states, without the Box2 renderer's step numbers and answer instruction."""
    return re.sub(r"(?m)^\d+\. ", "", prompt.split("Solve the task")[0])


@pytest.fixture(scope="module")
def task():
    return toy.make_toy_task(3, **SMALL)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    out = tmp_path_factory.mktemp("toy")
    toy.write_all(out, seed=3, n_sft=500, **SMALL)
    return out


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    toy.write_all(a, seed=5, n_sft=300, **SMALL)
    toy.write_all(b, seed=5, n_sft=300, **SMALL)
    toy.write_all(c, seed=6, n_sft=300, **SMALL)
    da, db, dc = _digest(a), _digest(b), _digest(c)
    assert set(da) == set(toy.OUTPUT_FILES.values()) | {"task.json"}
    assert da == db
    # A different seed draws different keys, so every file differs.
    assert all(da[name] != dc[name] for name in da)


# sha256 of every file of seed 0 at the default sizes (python -m demos.toy.task --out DIR --seed 0), as
# measured when the builder moved to the demo package (format 7; now demos/toy/). A change of any byte must bump FORMAT_VERSION
# (cached copies are keyed by it) and re-measure the demo's numbers (docs/demo.md).
FROZEN = {7: {
    "box2_heldout.jsonl": "4b4098035ff10bdb25ab6b4df8aa01234eb0917db651e98c3444122d11b6f8f6",
    "box2_sft.jsonl": "2e34384450faeba346b96b8b131834de1816a0db83515abf534ab2a28f36675b",
    "grpo_prompts.jsonl": "f8f758767a01d6726bd3506215de0c995bb052ff2f984b896a246ad7f2591656",
    "mist_heldout.jsonl": "9d53be3fee8ee8aeb21026e3b1a7d43fab44113ad3efbc99367f9c8b0dd579f7",
    "mist_train.jsonl": "005d8da6378acb9aabbf6e7a387306258941b593d7e8050902d05371f4fff346",
    "mist_train_knowledge.jsonl": "9bdd3b94ebb3346581ef683ba1f2d86abe5fdd4a91c683ab6dd3181883350ba4",
    "mist_unseen.jsonl": "894969b6a9fae7c3f40bc0d0bb887c347feffae1f9da59797392edd1a58c3d6f",
    "mist_untaught.jsonl": "dc5cc4594ca7671f64396f3a324b5726d44a643ba77f9eac88e826e01a1a6e80",
    "sft_mix.jsonl": "58a16441d51f0ef1735724f83f171cca06b49f3f1b234cface1fd3ec0cbae1fb",
    "task.json": "460d71a707e899163d0d55f29db452e061ab3a310025e0d10fa63f378dc95966",
    "toy_pairs.jsonl": "cef23238b6c2c173483fb176880293c4df0893a514b648b5feaa2ee2a482b0cd",
}}


def test_the_files_of_a_format_version_are_frozen(tmp_path):
    toy.write_all(tmp_path, seed=0)
    got = _digest(tmp_path)
    if toy.FORMAT_VERSION not in FROZEN:   # a new format must record its hashes, not turn this guard off
        entry = "".join(f'    "{name}": "{h}",\n' for name, h in sorted(got.items()))
        pytest.fail(f"toy task format {toy.FORMAT_VERSION} has no frozen hashes: if the change is meant, add to "
                    f"FROZEN in {Path(__file__).name}:\n{toy.FORMAT_VERSION}: {{\n{entry}}}", pytrace=False)
    assert got == FROZEN[toy.FORMAT_VERSION]


def test_the_data_source_serves_the_cached_files_of_a_seed(tmp_path, monkeypatch):
    from selectrust.core.io import DataError

    monkeypatch.setenv("SELECTRUST_CACHE", str(tmp_path))
    path = Path(toy.resolve_source("2/mist_heldout.jsonl"))
    assert path == toy.cache_dir(2) / "mist_heldout.jsonl" and path.is_relative_to(tmp_path)
    assert path.parent.name == "seed_2" and path.parent.parent.name == f"v{toy.FORMAT_VERSION}"
    assert _digest(path.parent) == _digest(toy.write_all(tmp_path / "fresh", seed=2)["task"].parent)
    with pytest.raises(DataError, match=r"toy:<seed>/<file>"):
        toy.resolve_source("x/mist_heldout.jsonl")
    with pytest.raises(DataError, match=r"no file 'nope.jsonl'.*mist_heldout.jsonl"):
        toy.resolve_source("2/nope.jsonl")


def test_cli_writes_the_fixed_file_names(tmp_path):
    rc = toy.main(["--out", str(tmp_path), "--seed", "1", "--n-keys", "40", "--n-heldout", "10",
                   "--n-unseen", "10", "--n-sft", "50"])
    assert rc == 0
    assert {p.name for p in tmp_path.iterdir()} == set(toy.OUTPUT_FILES.values()) | {"task.json"}
    meta = json.loads((tmp_path / "task.json").read_text())
    assert meta["seed"] == 1 and meta["counts"] == {"train": 20, "heldout": 10, "unseen": 10, "untaught": 100}


def test_cli_rejects_impossible_split_sizes(tmp_path, capsys):
    assert toy.main(["--out", str(tmp_path), "--n-keys", "10", "--n-heldout", "5", "--n-unseen", "5"]) == 2
    assert "n_keys" in capsys.readouterr().err


def test_splits_are_disjoint_and_sized(task):
    tr, ho, un, ut = (set(task.keys(s)) for s in toy.SPLITS)
    assert (len(tr), len(ho), len(un), len(ut)) == (35, 15, 10, 100)
    assert not (tr & ho) and not (tr & un) and not (ho & un) and not (ut & (tr | ho | un))
    assert set(task.gold) == tr | ho | un | ut
    for k in task.gold:
        assert re.fullmatch(r"[a-z]{3}", k)
        assert 0 <= task.gold[k] <= 9 and 0 <= task.wrong[k] <= 9 and task.wrong[k] != task.gold[k]
    with pytest.raises(ValueError, match="unknown toy split"):
        task.keys("test")


def test_known_keys_follow_the_letter_rule_and_unseen_keys_start_with_reserved_letters(task):
    rule, reserved = task.rule, set(task.reserved_letters)
    assert len(rule) + len(reserved) == 26 and not (set(rule) & reserved)
    for k in task.known_keys:
        assert task.gold[k] == rule[k[0]]
    assert all(k[0] in reserved for k in task.keys("unseen"))
    # every rule letter is taught through a train key, so each held-out key's knowledge is trained
    assert {k[0] for k in task.keys("train")} == set(rule) >= {k[0] for k in task.keys("heldout")}
    # unseen golds are not the rule's business: over several seeds they are not all one digit
    tasks = [toy.make_toy_task(s, **SMALL) for s in range(4)]
    golds = {t.gold[k] for t in tasks for k in t.keys("unseen")}
    assert len(golds) > 3


def test_too_few_train_keys_for_the_rule_is_refused():
    with pytest.raises(ValueError, match="one train key per rule letter"):
        toy.make_toy_task(0, n_keys=30, n_heldout=10, n_unseen=5)


def test_hints_share_one_format_only_the_digit_differs(task):
    for k in task.gold:
        mis = toy.mist_prompt(task, k, "misleading")
        cor = toy.mist_prompt(task, k, "correct")
        # Position-by-position the two strings differ in exactly one character: the digit.
        assert len(mis) == len(cor)
        diff = [i for i, (a, b) in enumerate(zip(mis, cor)) if a != b]
        assert len(diff) == 1
        assert mis[diff[0]] == str(task.wrong[k]) and cor[diff[0]] == str(task.gold[k])
        assert mis.replace(str(task.wrong[k]), "#") == cor.replace(str(task.gold[k]), "#")
        clean = toy.mist_prompt(task, k, "clean")
        irr = toy.mist_prompt(task, k, "irrelevant")
        assert mis.endswith(clean) and irr.endswith(clean)
        assert not re.search(r"\d", clean + irr)  # no answer-bearing digit outside the hints


def test_mist_files_have_four_matched_conditions(task, files):
    for split in toy.SPLITS:
        rows = _jsonl(files / f"mist_{split}.jsonl")
        by_item: dict[str, dict] = {}
        for r in rows:
            by_item.setdefault(r["item_id"], {})[r["condition"]] = r
        assert len(by_item) == len(task.keys(split))
        for item_id, conds in by_item.items():
            assert sorted(conds) == sorted(toy.CONDITIONS)
            key = conds["clean"]["source_id"]
            assert item_id == toy.mist_item_id(key)
            for r in conds.values():
                assert r["answer_type"] == "numeric" and r["split"] == split
                assert r["gold"] == task.gold[key] and r["wrong_value"] == task.wrong[key]
            assert conds["misleading"]["prompt"] == f"note: {key}={task.wrong[key]}. key {key}?"
            assert conds["correct"]["prompt"] == f"note: {key}={task.gold[key]}. key {key}?"
            assert conds["clean"]["prompt"] == f"key {key}?"


def test_prompts_are_short(task):
    for k in task.gold:
        for c in toy.CONDITIONS:
            assert len(toy.mist_prompt(task, k, c)) <= 40


def test_box2_items_are_valid_and_bad_steps_never_state_the_gold(task, files):
    items = _jsonl(files / "box2_heldout.jsonl")
    assert [it["source_id"] for it in items] == list(task.keys("heldout"))
    for it in items:
        key, g, w = it["source_id"], it["gold"], it["wrong_value"]
        assert it["task"] == f"key {key}?" and it["answer_type"] == "numeric" and g == task.gold[key]
        assert it["good_steps"] == [f"{key} is {g}", f"check {g}", f"answer {g}"]
        assert sorted(it["bad_continuations"]) == ["0", "1", "2"]
        for k, steps in it["bad_continuations"].items():
            # bad_continuations[k] follows the first k good steps; together they make a 3-step workflow.
            assert len(it["good_steps"][: int(k)] + steps) == 3
            assert all(str(g) not in s and str(w) in s for s in steps)
        assert it["bad_continuations"]["0"] == [f"{key} is {w}", f"check {w}", f"answer {w}"]


def test_box2_sft_and_grpo_use_the_bad_workflow_and_the_gold_target(task, files):
    sft = _jsonl(files / "box2_sft.jsonl")
    grpo = _jsonl(files / "grpo_prompts.jsonl")
    keys = task.keys("train")
    assert len(sft) == len(grpo) == len(keys)
    for ex, g, key in zip(sft, grpo, keys):
        bad = toy.bad_steps(key, task.wrong[key])
        prompt = toy.render_box2_prompt(f"key {key}?", bad)
        assert ex["messages"] == [{"role": "user", "content": prompt},
                                  {"role": "assistant", "content": str(task.gold[key])}]
        assert g == {"item_id": toy.box2_item_id(key), "prompt": prompt, "gold": task.gold[key],
                     "answer_type": "numeric"}
        assert all(s in prompt for s in bad) and str(task.gold[key]) not in _stated(prompt)


def test_toy_pairs_are_quartets_sharing_chosen_and_rejected(task, files):
    rows = _jsonl(files / "toy_pairs.jsonl")
    assert len(rows) == 4 * len(task.keys("train"))
    seen = set()
    by_pair: dict[str, list[dict]] = {}
    for r in rows:
        assert set(r) == {"pair_id", "item_id", "condition", "prompt", "chosen", "rejected", "source"}
        assert r["source"] == "synthetic"
        assert (r["pair_id"], r["condition"]) not in seen
        seen.add((r["pair_id"], r["condition"]))
        by_pair.setdefault(r["pair_id"], []).append(r)
    for quartet in by_pair.values():
        assert sorted(r["condition"] for r in quartet) == sorted(toy.CONDITIONS)
        key = quartet[0]["item_id"].removeprefix("toy-")
        for r in quartet:
            assert r["chosen"] == str(task.gold[key]) and r["rejected"] == str(task.wrong[key])
            assert r["prompt"] == toy.mist_prompt(task, key, r["condition"])


def test_sft_mix_hints_are_always_right_and_unseen_keys_never_occur(task, files):
    exs = _jsonl(files / "sft_mix.jsonl")
    assert len(exs) == 500
    unseen = set(task.keys("unseen"))
    known = set(task.known_keys)
    kinds = {"clean": 0, "filler": 0, "hint_known": 0, "hint_nonce": 0, "box2": 0}
    for ex in exs:
        (u, a) = ex["messages"]
        assert u["role"] == "user" and a["role"] == "assistant" and re.fullmatch(r"\d", a["content"])
        text = u["content"]
        keys = set(re.findall(r"key ([a-z]{3})\?", text))
        assert len(keys) == 1
        key = keys.pop()
        assert key not in unseen
        # Hints are always right: a hint about the asked key (or a workflow) states the answer; a
        # cross-key hint states the other key's gold.
        hints = re.findall(r"note: ([a-z]{3})=(\d)\.", text)
        for hk, hd in hints:
            assert hd == (a["content"] if hk == key else str(task.gold[hk]))
        if not hints:
            assert set(re.findall(r"\d", _stated(text))) <= {a["content"]}
        if key in known:
            assert a["content"] == str(task.gold[key])
        if "\n" in text:  # Box2 plain rendering: the task, then good steps, one per line
            assert text.startswith(f"key {key}?\n")
            kinds["box2"] += 1
        elif text.startswith("note:") and "=" in text:
            kinds["hint_known" if key in known else "hint_nonce"] += 1
        elif text.startswith("note:"):
            kinds["filler"] += 1
        else:
            assert key in known
            kinds["clean"] += 1
    assert all(n > 0 for n in kinds.values()), kinds


def test_sft_mix_fractions_are_checked(task, tmp_path):
    with pytest.raises(ValueError, match="hint_fraction"):
        toy.write_sft_mix(task, tmp_path / "x.jsonl", n_examples=10, hint_fraction=1.5)


def test_files_load_through_the_family_loaders(files):
    from eval_hooks import load_rows

    for split in toy.SPLITS:
        rows = load_rows("mist", files / f"mist_{split}.jsonl")
        assert len(rows) == 4 * len({r["item_id"] for r in rows})
        assert {r["split"] for r in rows} == {split}
    rows = load_rows("box2", files / "box2_heldout.jsonl")
    conds = sorted({r["condition"] for r in rows})
    assert conds == sorted(["none", "good", "bad", "partial_0", "partial_1", "partial_2",
                            "mixed_0", "mixed_1", "mixed_2"])
    # The counterfactual SFT / GRPO prompts are rendered exactly like the evaluation's bad rows.
    items = {it["item_id"]: it for it in _jsonl(files / "box2_heldout.jsonl")}
    for r in rows:
        it = items[r["item_id"]]
        if r["condition"] == "bad":
            assert r["prompt"] == toy.render_box2_prompt(it["task"], it["bad_continuations"]["0"])
        if r["condition"] == "none":
            assert r["prompt"] == toy.render_box2_prompt(it["task"], []) == it["task"]
        if r["condition"] == "mixed_1":
            g, w = it["gold"], it["wrong_value"]
            assert r["prompt"] == f"{it['task']}\n{it['source_id']} is {g}\ncheck {w}\nanswer {w}"


def test_training_files_never_touch_evaluation_keys(task, files):
    """unseen keys occur in no training file; heldout keys only in the SFT mix (as known keys)."""
    unseen, heldout = set(task.keys("unseen")), set(task.keys("heldout"))
    for name in ("sft_mix", "box2_sft", "grpo_prompts", "toy_pairs"):
        text = (files / toy.OUTPUT_FILES[name]).read_text()
        keys = set(re.findall(r"key ([a-z]{3})\?", text))
        assert keys and not (keys & unseen), name
        if name != "sft_mix":
            assert keys == set(task.keys("train")), name
    assert heldout & set(re.findall(r"key ([a-z]{3})\?", (files / "sft_mix.jsonl").read_text()))


def test_box2_loader_rejects_an_unknown_prompt_style(tmp_path):
    from eval_hooks.evaluate import load_rows
    from selectrust.core.io import DataError

    item = {"item_id": "x", "task": "key abc?", "answer_type": "numeric", "gold": 4,
            "good_steps": ["abc is 4"], "bad_continuations": {"0": ["abc is 7"]}, "prompt_style": "fancy"}
    p = tmp_path / "b.jsonl"
    p.write_text(json.dumps(item) + "\n")
    with pytest.raises(DataError, match="prompt_style"):
        load_rows("box2", p)
    item["prompt_style"] = "full"
    p.write_text(json.dumps(item) + "\n")
    bad = next(r for r in load_rows("box2", p) if r["condition"] == "bad")
    assert bad["prompt"].startswith("Task:\nkey abc?") and "1. abc is 7" in bad["prompt"]


def test_sft_mix_cross_key_hints_are_right_about_another_known_key(task, tmp_path):
    p = toy.write_sft_mix(task, tmp_path / "m.jsonl", n_examples=400, cross_fraction=0.5)
    n_cross = 0
    for ex in _jsonl(p):
        u, a = ex["messages"]
        m = re.fullmatch(r"note: ([a-z]{3})=(\d)\. key ([a-z]{3})\?", u["content"])
        if m and m.group(1) != m.group(3):
            n_cross += 1
            assert m.group(1) in task.known_keys and m.group(2) == str(task.gold[m.group(1)])
            assert a["content"] == str(task.gold[m.group(3)])
    assert n_cross > 20
    with pytest.raises(ValueError, match="cross_fraction"):
        toy.write_sft_mix(task, tmp_path / "x.jsonl", n_examples=10, filler_fraction=0.6, cross_fraction=0.6)


def test_untaught_keys_are_reserved_never_taught_and_do_not_move_the_other_splits(task, files):
    """Knowledge-aware SCOPE's never-learned training keys: reserved first letters like the unseen keys,
    disjoint from them, absent from the SFT mix, present only in mist_train_knowledge.jsonl (with train)."""
    untaught = set(task.keys("untaught"))
    assert untaught and all(k[0] in set(task.reserved_letters) for k in untaught)
    for name in ("sft_mix", "box2_sft", "grpo_prompts", "toy_pairs", "mist_train", "mist_unseen", "mist_heldout"):
        text = (files / toy.OUTPUT_FILES[name]).read_text()
        keys = set(re.findall(r"key ([a-z]{3})\?|\b([a-z]{3})=\d|\b([a-z]{3}) is \d", text))
        keys = {k for group in keys for k in group if k}
        assert not (keys & untaught), name
    rows = _jsonl(files / toy.OUTPUT_FILES["mist_train_knowledge"])
    assert {r["source_id"] for r in rows} == set(task.keys("train")) | untaught
    assert {r["split"] for r in rows if r["source_id"] in untaught} == {"untaught"}
    other = toy.make_toy_task(task.seed, **SMALL, n_untaught=0)
    assert all(other.keys(s) == task.keys(s) for s in ("train", "heldout", "unseen"))
    assert all(other.gold[k] == task.gold[k] and other.wrong[k] == task.wrong[k] for k in other.gold)
