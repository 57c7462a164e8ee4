"""A run dir in use, read-only or unwritable is one line, exit 2, before Hydra writes a log into it; a refused start
leaves nothing behind (issue 59: BAD 6, BAD 7 and the empty ``dpo.log``/``evaluate.log`` of a failed start).

Subprocesses use the tiny presets; every refusal here comes before any model loads."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import dist_helpers as dh
from selectrust.core.errors import ConfigError


def _env() -> dict:
    out = dh.env(PYTHONPATH=str(dh.REPO))
    out.pop("HYDRA_FULL_ERROR", None)
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        out.pop(k, None)
    return out


def _run(cmd: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=_env(), cwd=dh.REPO, capture_output=True, text=True, timeout=timeout)


def _one_line(stderr: str) -> str:
    assert "Traceback" not in stderr and "Error executing job" not in stderr, stderr[-3000:]
    lines = [l for l in stderr.splitlines() if l.strip() and "Warning" not in l and not l.startswith("  ")
             and "%|" not in l]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def test_a_run_dir_held_by_another_run_is_one_line_exit_2(tmp_path):
    from trainer.runtime.run_dir import RunLock

    run = tmp_path / "run"
    run.mkdir()
    (run / "dpo.log").write_text("the other run's log\n")
    lock = RunLock(run).acquire()  # this process is "the other run" (flock: the subprocess sees it held)
    try:
        p = _run(dh.command("dpo", [f"trainer.run_dir={run}"]))
    finally:
        lock.release()
    assert p.returncode == 2, p.stderr[-3000:]
    line = _one_line(p.stderr)
    assert line.startswith("error: ") and "is in use by another run" in line and "trainer.run_dir" in line, line
    assert (run / "dpo.log").read_text() == "the other run's log\n"  # Hydra did not open (truncate) its log


_READ_ONLY = textwrap.dedent("""
    import builtins, errno, io, os, runpy, sys
    ro = os.path.realpath(sys.argv[1]); sys.argv = sys.argv[2:]
    def _check(path, writing):
        p = os.path.realpath(os.fspath(path)) if isinstance(path, (str, bytes, os.PathLike)) else ""
        if writing and isinstance(p, str) and (p == ro or p.startswith(ro + os.sep)):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
    real_open, real_os_open, real_mkdir = builtins.open, os.open, os.mkdir
    def fake_open(file, mode="r", *a, **k):
        _check(file, any(c in mode for c in "wax+")); return real_open(file, mode, *a, **k)
    def fake_os_open(path, flags, *a, **k):
        _check(path, flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)); return real_os_open(path, flags, *a, **k)
    def fake_mkdir(path, *a, **k):
        _check(path, True); return real_mkdir(path, *a, **k)
    builtins.open = io.open = fake_open; os.open = fake_os_open; os.mkdir = fake_mkdir
    runpy.run_path(sys.argv[0], run_name="__main__")
""")


@pytest.mark.parametrize("recipe,key", [("dpo", "trainer.run_dir"), ("evaluate", "out_dir")])
def test_a_read_only_run_dir_is_one_line_exit_2_before_hydra_logs(tmp_path, recipe, key):
    """Root ignores file modes, so the read-only directory is simulated: every open for writing under it fails with
    EACCES, as on a read-only directory (Hydra's log file handler included)."""
    run = tmp_path / "ro"
    run.mkdir()
    cmd = [sys.executable, "-c", _READ_ONLY, str(run), *dh.command(recipe, [f"{key}={run}"])[1:]]
    p = _run(cmd)
    assert p.returncode == 2, p.stderr[-3000:]
    line = _one_line(p.stderr)
    assert line.startswith("error: ") and str(run) in line and key in line and line.startswith(f"error: cannot write {run}: "), line
    assert list(run.iterdir()) == []


@pytest.mark.parametrize("recipe,key", [("dpo", "trainer.run_dir"), ("evaluate", "out_dir")])
def test_a_refused_start_leaves_nothing_behind(tmp_path, recipe, key):
    out = tmp_path / "new" / "out"
    p = _run(dh.command(recipe, [f"{key}={out}", f"model.path={tmp_path / 'nosuch-model'}"]))
    assert p.returncode == 2, p.stderr[-3000:]
    assert "nosuch-model" in _one_line(p.stderr)
    assert not (tmp_path / "new").exists(), sorted(str(x) for x in (tmp_path / "new").rglob("*"))


def test_a_refused_start_keeps_a_run_dir_that_was_there(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    p = _run(dh.command("evaluate", [f"out_dir={out}", f"model.path={tmp_path / 'nosuch-model'}"]))
    assert p.returncode == 2, p.stderr[-3000:]
    assert (out / "notes.txt").read_text() == "mine\n"


def test_run_dir_locked_is_an_input_error():
    from eval_hooks.cli_contract import classify
    from trainer.config.cli_help import config_errors
    from trainer.runtime.run_dir import RunDirLocked

    status, line = classify(RunDirLocked("/r is in use by another run"), config_errors())
    assert status == 2 and line == "error: /r is in use by another run"


def test_the_other_ranks_learn_of_a_held_run_dir_as_a_config_error(monkeypatch):
    """Shared run dir: rank 0 found it held; every other rank raises the same one line (a ConfigError), not a
    RuntimeError traceback. Node-local: the same through ``_raise_for_others``."""
    import accelerate.utils

    from trainer.runtime import run_dir as rd

    def broadcast(message, from_process=0):
        message[0] = "RunDirLocked: /r is in use by another run (host h, pid 1)"

    monkeypatch.setattr(accelerate.utils, "broadcast_object_list", broadcast)
    acc = type("Acc", (), {"num_processes": 2})()
    with pytest.raises(ConfigError, match=r"^/r is in use by another run \(host h, pid 1\)$"):
        rd._agree_on_start(acc, None, None, rd.Path("/r"))
    with pytest.raises(ConfigError, match=r"^/r is in use"):
        rd._raise_for_others([("RunDirLocked", "/r is in use by another run")], "a node's local rank 0")
