"""The reference server's command line under the error contract (issue 51): a bad ``--model`` is one line naming it,
exit 2, before any model loads, not a traceback and exit 1."""

from __future__ import annotations

import subprocess
import sys

import pytest

from eval_hooks.cli_contract import INPUT_EXIT, classify

SERVER = "selectrust.generation.backends.reference_server"
BAD_SOURCES = ("missing", "empty", "no-config", "text.gguf", "pkg")


def bad_source(kind: str, tmp_path) -> str:
    """A model source of ``kind`` that cannot load: missing, empty, a directory without config.json, a text file named
    .gguf, a ``pkg:`` package that is not installed."""
    if kind == "missing":
        return str(tmp_path / "no-such-model")
    if kind == "empty":
        (tmp_path / "empty").mkdir()
        return str(tmp_path / "empty")
    if kind == "no-config":
        (tmp_path / "no-config").mkdir()
        (tmp_path / "no-config" / "model.safetensors").write_bytes(b"")
        return str(tmp_path / "no-config")
    if kind == "text.gguf":
        (tmp_path / "text.gguf").write_text("not a model\n")
        return str(tmp_path / "text.gguf")
    assert kind == "pkg"
    return "pkg:selectrust_no_such_model_package"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", SERVER, *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("kind", BAD_SOURCES)
def test_a_bad_model_is_one_line_naming_it_exit_2(kind, tmp_path):
    source = bad_source(kind, tmp_path)
    done = _run("--model", source, "--port", "0")
    lines = done.stderr.splitlines()
    assert done.returncode == INPUT_EXIT, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: --model") and source in lines[0], done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert "listening on" not in done.stdout  # refused before it served (the model never loaded)


def test_a_non_loopback_host_is_one_line_exit_2():
    done = _run("--model", "tiny", "--host", "0.0.0.0")
    assert done.returncode == INPUT_EXIT and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [done.stderr.strip()] and "--host" in done.stderr and "0.0.0.0" in done.stderr


@pytest.mark.parametrize("kind", ["missing", "pkg"])
def test_the_line_is_the_one_the_contract_prints_for_that_error(kind, tmp_path, capsys):
    # the server cannot import eval_hooks (a foundation module): its line must still be the contract's own
    from selectrust.generation.backends.reference_server import cli
    from selectrust.model import ModelSourceError, check_model_path

    source = bad_source(kind, tmp_path)
    with pytest.raises(ModelSourceError) as e:
        check_model_path(source, "--model")
    assert cli(["--model", source]) == INPUT_EXIT
    assert capsys.readouterr().err == classify(e.value)[1] + "\n" and classify(e.value)[0] == INPUT_EXIT


def test_a_bad_model_never_loads(monkeypatch, tmp_path, capsys):
    from selectrust.generation.backends.reference_server import cli

    import selectrust.model as em

    for name in ("load_model", "load_tokenizer"):
        monkeypatch.setattr(em, name, lambda *a, **k: pytest.fail("a model was loaded for a bad --model"))
    assert cli(["--model", bad_source("empty", tmp_path)]) == INPUT_EXIT
    assert "the model directory is empty" in capsys.readouterr().err
