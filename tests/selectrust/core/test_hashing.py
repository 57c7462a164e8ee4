"""The one file hasher and the one directory hasher (selectrust/core/hashing.py).

The directory hashes decide whether a finished chain stage is reused (``stage_start.json``) and whether a resumed
run's data changed (``data_hashes.json``): their values are pinned here on fixed bytes, as the code before
selectrust/core/hashing.py computed them (trainer.data.pins.tree_sha256 and recipes.stages.start.weights_sha256),
so records written before the move still match."""

from __future__ import annotations

import hashlib
import os

from selectrust.core import hashing
from selectrust.core.hashing import dir_sha256, file_sha256, file_sha256_once
from recipes.stages.start import path_identity, weights_sha256
from trainer.data.pins import pin

TREE = "7a0b1d1897713a2b54e5b2c263da0dfca26eb0d15a21ec83e86a77ca0d59b318"     # every file, recursively
WEIGHTS = "967b0a3356b8560ca816dda5d20d9434b2b0ad8c37dcf9ba9d1bf8d8c18edf24"  # *.safetensors and the configs
BEE = "c150e5a8a604acebd8d15bd7bf8ea96b2874bdcc91dee6319977d353251283b0"     # sha256(b"bee\n")


def _model_dir(d):
    """A directory whose path order differs from its posix-string order (``a/b.txt`` before ``a-c/x.bin``)."""
    d.mkdir()
    (d / "a-c").mkdir()
    (d / "a").mkdir()
    (d / "a" / "b.txt").write_bytes(b"bee\n")
    (d / "a-c" / "x.bin").write_bytes(bytes(range(256)))
    (d / "config.json").write_text('{"vocab_size": 3}')
    (d / "model.safetensors").write_bytes(b"\x00" * 1000)
    (d / "adapter_config.json").write_text("{}")
    (d / "notes.md").write_text("ignored by weights")
    return d


def test_file_sha256_is_the_sha256_of_the_bytes(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"bee\n")
    assert file_sha256(f) == BEE == hashlib.sha256(b"bee\n").hexdigest()
    big = tmp_path / "big"
    big.write_bytes(os.urandom((1 << 22) + 5))  # more than one chunk
    assert file_sha256(big) == hashlib.sha256(big.read_bytes()).hexdigest()


def test_directory_hashes_that_decide_stage_reuse_are_unchanged(tmp_path):
    d = _model_dir(tmp_path / "m")
    assert dir_sha256(d) == TREE
    assert weights_sha256(d) == WEIGHTS
    assert path_identity(str(d)) == {"path": str(d), "sha256": WEIGHTS}
    (d / "model.safetensors").unlink()  # no weights: any other directory's files
    assert path_identity(str(d))["sha256"] == dir_sha256(d) != TREE


def test_a_saved_dataset_directory_pins_to_the_tree_hash(tmp_path):
    d = _model_dir(tmp_path / "ds")
    (d / "dataset_info.json").write_text("{}")
    (d / "state.json").write_text("{}")
    (d / "data-00000-of-00001.arrow").write_bytes(b"rows")
    expected = hashlib.sha256()
    for p in sorted(q for q in d.rglob("*") if q.is_file()):  # the rule the records were written under
        expected.update(f"{p.relative_to(d).as_posix()}\0{hashlib.sha256(p.read_bytes()).hexdigest()}\n".encode())
    got = pin(str(d))
    assert got["sha256"] == dir_sha256(d) == expected.hexdigest() and got["kind"] == "dataset_dir"


def test_file_sha256_once_hashes_a_file_once_until_it_changes(tmp_path, monkeypatch):
    f = tmp_path / "w"
    f.write_bytes(b"one")
    calls = []
    real = hashing.file_sha256
    monkeypatch.setattr(hashing, "file_sha256", lambda p: calls.append(p) or real(p))
    assert file_sha256_once(f) == file_sha256_once(f) == hashlib.sha256(b"one").hexdigest() and len(calls) == 1
    st = f.stat()
    f.write_bytes(b"two")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, mtime set back: the ctime still changed
    assert file_sha256_once(f) == hashlib.sha256(b"two").hexdigest() and len(calls) == 2
    hashing.remember_file_sha256(f, "recorded")
    assert file_sha256_once(f) == "recorded" and len(calls) == 2


def test_an_adapter_config_rewritten_in_another_order_keeps_the_stage_hash(tmp_path):
    """Issue 42 #10: PEFT writes target_modules from a set, in a per-process order; the weights are unchanged, so
    the stage hash must be too. A change in what the config says still changes it."""
    d = tmp_path / "final"
    d.mkdir()
    (d / "adapter_model.safetensors").write_bytes(b"\x01" * 100)
    (d / "adapter_config.json").write_text('{"r": 8, "target_modules": ["q_proj", "v_proj", "k_proj"]}')
    before = weights_sha256(d)
    (d / "adapter_config.json").write_text('{\n  "target_modules": ["v_proj", "k_proj", "q_proj"],\n  "r": 8\n}')
    assert weights_sha256(d) == before
    (d / "adapter_config.json").write_text('{"r": 16, "target_modules": ["q_proj", "v_proj", "k_proj"]}')
    assert weights_sha256(d) != before
    (d / "adapter_config.json").write_text('{"r": 8, "target_modules": ["q_proj", "v_proj"]}')
    assert weights_sha256(d) != before
