"""Every data source kind is pinned by a content hash in data_hashes.json (trainer/data/pins.py), so an edited
dataset is refused on resume like an edited file (issue 25, must-fix 2). Tiny DPO on CPU, in-process."""

from __future__ import annotations

import json
import shutil

import pytest

import dist_helpers as dh
from recipe_utils import run_recipe
from selectrust.core.errors import ConfigError


@pytest.fixture(autouse=True)
def _one_thread():
    yield from dh.one_torch_thread()


def _dpo(run_dir, data, *overrides):
    return run_recipe("dpo", "dpo", [f"data.train_path={data}", "eval=none", f"trainer.run_dir={run_dir}",
                                     "trainer.progress=false", "trainer.save_every=0", "optim.batch_size=4",
                                     "optim.grad_accum=1", "trainer.max_steps=4", *overrides])


def _rows(tmp_path):
    pairs = dh.write_pairs(tmp_path / "pairs.jsonl", 5)
    return [json.loads(l) for l in pairs.read_text().splitlines()]


def _edited(rows):
    return [{**r, "chosen": r["rejected"], "rejected": r["chosen"]} for r in rows[:-8]]  # swap, drop 8 rows


def _save(rows, directory):
    import datasets

    shutil.rmtree(directory, ignore_errors=True)
    datasets.Dataset.from_list(rows).save_to_disk(str(directory))


def _write_jsonl_dir(rows, directory):
    directory.mkdir(exist_ok=True)
    (directory / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("kind", ["save_to_disk", "hf_local_dir"])
def test_an_edited_dataset_directory_is_refused_on_resume(tmp_path, kind):
    rows, d = _rows(tmp_path), tmp_path / "ds"
    write = _save if kind == "save_to_disk" else _write_jsonl_dir
    data = str(d) if kind == "save_to_disk" else f"hf:{d}:train"
    write(rows, d)
    run = tmp_path / "run"
    _dpo(run, data, "trainer.stop_at_step=2")
    recorded = json.loads((run / "data_hashes.json").read_text())["data.train_path"]
    assert recorded["kind"] == "dataset_dir" and recorded["path"] == str(d.resolve())
    write(_edited(rows), d)
    with pytest.raises(ConfigError, match=rf"(?s)refusing to resume.*data.train_path: {d.resolve()}: sha256 at the "
                                          rf"run's start {recorded['sha256']} != now [0-9a-f]{{64}}"):
        _dpo(run, data)
    assert not (run / "checkpoints" / "step_4").exists()
    write(rows, d)  # the same rows again (new files, new mtimes): resumes
    assert _dpo(run, data).step == 4


def test_an_edited_toy_source_file_is_refused_on_resume(tmp_path, monkeypatch):
    import selectrust.core.data_sources as ds

    cache = tmp_path / "cache.jsonl"
    cache.write_text("".join(json.dumps(r) + "\n" for r in _rows(tmp_path)))
    monkeypatch.setitem(ds.DATA_SOURCES.registered, "pinsrc", lambda rest: str(cache))
    run = tmp_path / "run"
    _dpo(run, "pinsrc:0/pairs.jsonl", "trainer.stop_at_step=2")
    recorded = json.loads((run / "data_hashes.json").read_text())["data.train_path"]
    assert recorded["source"] == "pinsrc:0/pairs.jsonl" and recorded["path"] == str(cache.resolve())
    cache.write_text("".join(json.dumps(r) + "\n" for r in _edited(_rows(tmp_path))))
    with pytest.raises(ConfigError, match=rf"data.train_path: {cache.resolve()}: sha256 at the run's start "
                                          rf"{recorded['sha256']} != now"):
        _dpo(run, "pinsrc:0/pairs.jsonl")


def test_a_hub_dataset_is_pinned_by_the_rows_read(tmp_path, monkeypatch):
    import selectrust.core.hf_data as hf
    from trainer.data.pins import pin

    rows = [(1, {"prompt": "a", "chosen": "b"}), (2, {"prompt": "c", "chosen": "d"})]
    monkeypatch.setattr(hf, "load_dataset_records", lambda source: (rows, source))
    first = pin("hf:org/name:train")
    assert first["kind"] == "rows" and first["path"] == "hf:org/name:train"
    assert pin("hf:org/name:train") == first
    rows[1] = (2, {"prompt": "c", "chosen": "e"})
    assert pin("hf:org/name:train")["sha256"] != first["sha256"]
