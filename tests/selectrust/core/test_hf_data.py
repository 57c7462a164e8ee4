"""Data from ``datasets``: ``save_to_disk`` directories and ``hf:<local dataset dir>[:config][:split]`` ids load
through the same validation as JSONL files; errors name the dataset and the row. Offline (no hub access)."""

import json

import pytest

from selectrust.core.hf_data import parse_hf_spec
from selectrust.core.io import DataError, read_records
from trainer.data.train_data import resolve_data_path
from trainer.dpo.data import load_pairs
from trainer.rl.rollout import load_rl_prompts

import datasets  # noqa: E402  (a dependency: a missing install fails, it does not skip)


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True, raising=False)


def _jsonl(path):
    return [json.loads(l) for l in open(path) if l.strip()]


@pytest.mark.parametrize("spec, want", [
    ("hf:openai/gsm8k", ("openai/gsm8k", None, None)),
    ("hf:openai/gsm8k:main", ("openai/gsm8k", "main", None)),
    ("hf:openai/gsm8k:main:test", ("openai/gsm8k", "main", "test")),
    ("hf:org/name:test", ("org/name", None, "test")),
    ("hf:org/name:train[:100]", ("org/name", None, "train[:100]")),
    ("hf:org/name:cfg:validation[10%:]", ("org/name", "cfg", "validation[10%:]")),
])
def test_parse_hf_spec(spec, want):
    assert parse_hf_spec(spec) == want


@pytest.mark.parametrize("bad", ["hf:", "hf:a/b::test", "hf:a/b:c:d:e"])
def test_bad_hf_spec_names_the_form(bad):
    with pytest.raises(DataError, match="hf:<org/name>"):
        read_records(bad)


def test_save_to_disk_pairs_equal_the_jsonl_file(tmp_path):
    """The toy DPO pairs, saved with save_to_disk, load (and validate) to the same rows as the JSONL file."""
    src = resolve_data_path("toy:0/toy_pairs.jsonl")
    recs = _jsonl(src)
    d = tmp_path / "pairs_ds"
    datasets.Dataset.from_list(recs).save_to_disk(str(d))
    from_file, from_ds = load_pairs(src), load_pairs(str(d))
    strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]  # noqa: E731
    assert strip(from_ds.rows) == strip(from_file.rows) and len(from_ds.rows) == len(recs)
    # a bad row is reported by dataset and row, as a file's line would be
    bad = [dict(r) for r in recs[:5]]
    del bad[2]["chosen"]
    bad_dir = tmp_path / "bad_ds"
    datasets.Dataset.from_list(bad).save_to_disk(str(bad_dir))
    with pytest.raises(DataError, match=rf"{bad_dir}, row 3, field 'chosen'"):
        load_pairs(str(bad_dir))


def test_dataset_dict_needs_a_split(tmp_path):
    rows = [{"item_id": f"i{k}", "prompt": f"q{k}", "gold": str(k), "answer_type": "numeric"} for k in range(4)]
    d = tmp_path / "rl_ds"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:3]),
                          "test": datasets.Dataset.from_list(rows[3:])}).save_to_disk(str(d))
    assert [r["item_id"] for r in load_rl_prompts(f"{d}:test")] == ["i3"]
    assert [r["item_id"] for r in load_rl_prompts(f"{d}:train")] == ["i0", "i1", "i2"]
    with pytest.raises(DataError, match=r"splits \['test', 'train'\]; name one"):
        load_rl_prompts(str(d))
    with pytest.raises(DataError, match="no split 'dev'"):
        load_rl_prompts(f"{d}:dev")


def test_hf_id_of_a_local_dataset_directory(tmp_path):
    """``hf:<dir>:<split>`` goes through datasets.load_dataset (a folder of JSONL files, no network)."""
    d = tmp_path / "local"
    (d / "data").mkdir(parents=True)
    good = [{"item_id": "a", "prompt": "2+2?", "gold": "4", "answer_type": "numeric"},
            {"item_id": "b", "prompt": "3+3?", "gold": "6", "answer_type": "numeric"}]
    (d / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in good))
    bad = [good[0], {"item_id": "c", "prompt": "1+1?", "answer_type": "numeric"}]
    (d / "data" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bad))
    rows = load_rl_prompts(f"hf:{d}:train")
    assert [(r["item_id"], r["gold"]) for r in rows] == [("a", "4"), ("b", "6")]
    with pytest.raises(DataError, match=rf"hf:{d}:test, row 2, field 'gold'"):
        load_rl_prompts(f"hf:{d}:test")
    with pytest.raises(DataError, match=r"splits \['test', 'train'\]"):
        load_rl_prompts(f"hf:{d}")


def test_unknown_hub_id_offline_is_a_data_error():
    with pytest.raises(DataError, match=r"hf:no-such-org/no-such-dataset-xyz: cannot load dataset"):
        read_records("hf:no-such-org/no-such-dataset-xyz")
