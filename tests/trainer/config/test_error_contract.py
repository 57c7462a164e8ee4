"""The one error contract of every entry point (eval_hooks/cli_contract.py; README "Errors and stops"): a config or
input error is one line naming the key or file, exit 2; a full disk one line, exit 1; SIGTERM one line, exit 0;
Ctrl-C one line, exit 130; a traceback only with --debug or HYDRA_FULL_ERROR=1. Also optim.lr=nan/inf refused by
the config checks, and a run dir holding only a failed start's config.yaml taking the corrected command.

Subprocesses use the tiny presets; every config error here fails before any model loads."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import dist_helpers as dh
from recipe_utils import compose, run_recipe
from selectrust.core.errors import ConfigError

FIXTURES = dh.REPO / "tests" / "data" / "eval"


def _env(**extra) -> dict:
    out = dh.env(**extra)
    out.pop("HYDRA_FULL_ERROR", None)  # the contract's default (no traceback) is what is tested
    return out


def _run(cmd: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=_env(), cwd=dh.REPO, capture_output=True, text=True, timeout=timeout)


def _one_line(stderr: str) -> str:
    """The stderr of a contract exit: exactly one non-empty line (library warnings, progress bars and the response
    log's notes aside) and no traceback."""
    assert "Traceback" not in stderr and "Error executing job" not in stderr, stderr[-3000:]
    lines = [l for l in stderr.splitlines() if l.strip() and "Warning" not in l and not l.startswith(("  ", "eval:"))
             and "%|" not in l]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


# -- case 8: config-check errors are one line, exit 2, in the recipes and the chain --------------------------
@pytest.mark.parametrize("script,args,names", [
    ("dpo", ["optim.batch_size=0"], "optim.batch_size must be >= 1, got 0"),
    ("dpo", ["optim.batch_size=abc"], "full_key: optim.batch_size"),  # Hydra's own composition error
    ("chain", ["recipe=box2_tiny", "stages.sft.extra=['optim.batch_size=0']"], "optim.batch_size must be >= 1"),
])
def test_a_config_error_is_one_line_naming_the_key_exit_2(tmp_path, script, args, names):
    p = _run(dh.command(script, [*args, f"trainer.run_dir={tmp_path / 'run'}"]))
    assert p.returncode == 2, p.stderr[-3000:]
    line = _one_line(p.stderr)
    assert line.startswith("error: ") and names in line, line


def test_debug_shows_the_traceback(tmp_path):
    p = _run(dh.command("dpo", ["optim.batch_size=0", "--debug", f"trainer.run_dir={tmp_path / 'run'}"]))
    assert p.returncode == 1 and "Traceback" in p.stderr and "optim.batch_size must be >= 1" in p.stderr


# -- case 9: nan and inf are refused by the config checks; a failed start's config.yaml is no resume --------
@pytest.mark.parametrize("override,key", [("optim.lr=nan", "optim.lr"), ("optim.lr=inf", "optim.lr"),
                                          ("optim.lr=-inf", "optim.lr"), ("algo.beta=nan", "algo.beta"),
                                          ("optim.betas=[0.9,nan]", r"optim.betas\[1\]"),
                                          ("optim.max_grad_norm=inf", "optim.max_grad_norm")])
def test_nan_and_inf_are_refused_naming_the_key(override, key):
    from trainer.config import validate_dpo

    with pytest.raises(ConfigError, match=rf"^{key} must be a finite number, got -?(nan|inf)"):
        validate_dpo(compose("dpo", [override]))


def test_nan_and_inf_are_refused_in_every_recipe_and_chain_stage():
    from trainer.config import validate_grpo, validate_sft

    with pytest.raises(ConfigError, match="algo.temperature must be a finite number"):
        validate_grpo(compose("grpo", ["algo.temperature=inf"]))
    with pytest.raises(ConfigError, match="optim.lr must be a finite number"):
        validate_sft(compose("sft", ["optim.lr=nan"]))


def _dpo(run_dir, pairs, *overrides):
    return run_recipe("dpo", "dpo", [f"data.train_path={pairs}", "eval=none", f"trainer.run_dir={run_dir}",
                                     "trainer.progress=false", "trainer.save_every=0", "optim.batch_size=4",
                                     "optim.grad_accum=1", "trainer.max_steps=4", *overrides])


@pytest.fixture
def _one_thread():
    yield from dh.one_torch_thread()


def test_a_run_dir_with_a_config_but_no_checkpoint_takes_the_corrected_command(tmp_path, _one_thread):
    """What optim.lr=inf left before the check (config.yaml, metrics lines, no checkpoint): the corrected command
    trains there from step 0 instead of being refused as a changed config; the old lines are dropped."""
    from omegaconf import OmegaConf

    pairs = dh.write_pairs(tmp_path / "pairs.jsonl", 5)
    run = tmp_path / "run"
    run.mkdir()
    saved = compose("dpo", [f"data.train_path={pairs}", "optim.lr=1e-2", f"trainer.run_dir={run}"])
    (run / "config.yaml").write_text(OmegaConf.to_yaml(saved, resolve=True).replace("lr: 0.01", "lr: .inf"))
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 0.7}) + "\n")
    assert _dpo(run, pairs, "optim.lr=1e-3").step == 4
    assert "lr: 0.001" in (run / "config.yaml").read_text()
    assert [r["step"] for r in dh.step_rows(run)] == [1, 2, 3, 4]


def test_a_run_dir_with_finished_work_still_refuses_a_changed_config(tmp_path, _one_thread):
    pairs = dh.write_pairs(tmp_path / "pairs.jsonl", 5)
    run = tmp_path / "run"
    _dpo(run, pairs)  # save_every=0: a finished run with final/ and run_complete.json, no checkpoint
    assert (run / "run_complete.json").exists()
    with pytest.raises(ConfigError, match=r"(?s)changed config .*algo.beta"):
        _dpo(run, pairs, "algo.beta=0.5")


# -- case 13: an out dir that cannot be written, or is a file -----------------------------------------------
def test_an_out_dir_that_is_a_file_is_one_line_exit_2(tmp_path):
    blocker = tmp_path / "taken"
    blocker.write_text("a file, not a directory\n")
    p = _run(dh.command("dpo", [f"trainer.run_dir={blocker}", "trainer.max_steps=1", "eval=none"]))
    assert p.returncode == 2, p.stderr[-3000:]
    line = _one_line(p.stderr)
    assert line.startswith(f"error: cannot write {blocker}: ") and "give another" in line, line
    assert blocker.read_text() == "a file, not a directory\n"  # nothing lost


def test_an_out_dir_under_a_file_is_one_line_exit_2_for_python_m_eval_hooks(tmp_path):
    blocker = tmp_path / "taken"
    blocker.write_text("x")
    out = blocker / "rows.jsonl"
    p = _run([sys.executable, "-m", "eval_hooks", "expand", "--family", "mist", "--data",
              str(FIXTURES / "mist_small.jsonl"), "--out", str(out)])
    assert p.returncode == 2, p.stderr[-3000:]
    assert _one_line(p.stderr).startswith("error: cannot write ")


@pytest.mark.parametrize("module,args,text", [
    ("demos.real.seeds", ["{tmp}/nowhere", "--out", "{tmp}/table"], "error: {tmp}/nowhere/summary.json: not a finished "
                                                                   "real-demo run"),
    ("demos.toy.task", ["--out", "{tmp}/taken/task"], "error: cannot write {tmp}/taken/task: "),
])
def test_the_demos_own_commands_keep_the_contract(tmp_path, module, args, text):
    (tmp_path / "taken").write_text("a file")
    p = _run([sys.executable, "-m", module, *(a.replace("{tmp}", str(tmp_path)) for a in args)])
    assert p.returncode == 2, p.stderr[-3000:]
    assert _one_line(p.stderr).startswith(text.replace("{tmp}", str(tmp_path)))


@pytest.mark.parametrize("error,code,text", [
    (PermissionError(errno.EACCES, "Permission denied", "/srv/runs/x"), 2, "error: cannot write /srv/runs/x: "
                                                                            "Permission denied"),
    (FileExistsError(errno.EEXIST, "File exists", "/srv/runs/x"), 2, "error: cannot write /srv/runs/x: File exists"),
    (OSError(errno.ENOSPC, "No space left on device", "/srv/runs/x/responses.jsonl"), 1,
     "error: disk full writing /srv/runs/x/responses.jsonl: No space left on device"),
])
def test_out_dir_errors_map_to_one_line(error, code, text):
    from eval_hooks.cli_contract import classify

    assert classify(error) == (code, text + (" (an out dir must be a writable directory, or a path where one can "
                                             "be made: give another)" if code == 2 else ""))


def test_an_error_the_contract_does_not_map_keeps_its_traceback():
    from eval_hooks.cli_contract import classify, run_with_contract

    assert classify(RuntimeError("a bug")) is None
    with pytest.raises(RuntimeError, match="a bug"):
        run_with_contract(lambda: (_ for _ in ()).throw(RuntimeError("a bug")))


# -- case 14: a full disk is the clear message alone -----------------------------------------------------------
FULL_DISK = """
import errno, sys, torch
real = torch.save
def full_disk(obj, f, *a, **k):
    if str(f).endswith("optimizer.pt") and ".tmp-step_4" in str(f):
        raise OSError(errno.ENOSPC, "No space left on device")
    return real(obj, f, *a, **k)
torch.save = full_disk
import recipes.dpo as dpo
from trainer.config.cli_help import cli_main
sys.argv = ["recipes/dpo.py", "--config-path", "{conf}", *sys.argv[1:]]  # imported, not run as a script
cli_main("dpo", dpo.main)
"""


def test_a_full_disk_is_one_line_exit_1_and_keeps_the_earlier_checkpoint(tmp_path):
    pairs = dh.write_pairs(tmp_path / "pairs.jsonl", 5)
    run = tmp_path / "run"
    p = _run([sys.executable, "-c", FULL_DISK.replace("{conf}", str(dh.REPO / "conf")), f"data.train_path={pairs}", "eval=none", f"trainer.run_dir={run}",
              "trainer.progress=false", "optim.batch_size=4", "optim.grad_accum=1", "trainer.max_steps=6",
              "trainer.save_every=2"])
    assert p.returncode == 1, p.stderr[-3000:]
    line = _one_line(p.stderr)
    assert line.startswith("error: disk full: no space left while writing ") and "are kept" in line, line
    assert [c.name for c in (run / "checkpoints").iterdir()] == ["step_2"]


# -- case 15: stopping a served evaluation ---------------------------------------------------------------------
class _HangingChat:
    """An OpenAI chat server that answers ``answer`` requests, then holds every later one until closed."""

    def __init__(self, answer: int):
        from chat_server import ChatServer

        self.release = threading.Event()
        self.answered = 0

        def reply(body, k):
            if self.answered >= answer:
                self.release.wait(120)
            self.answered += 1
            return "The answer is (A)."

        self.server = ChatServer(reply)

    def __enter__(self):
        self.server.__enter__()
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.server.__exit__(*exc)


@pytest.mark.parametrize("sig,code,what", [(signal.SIGTERM, 0, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")])
def test_stopping_a_served_evaluation_is_one_line_and_keeps_the_saved_responses(tmp_path, sig, code, what):
    out = tmp_path / "o"
    with _HangingChat(answer=20) as chat:  # the response log saves chunks of 16
        cmd = dh.command("evaluate", ["eval=toy_mist", f"out_dir={out}", "generation=openai_chat", f"generation.url={chat.server.url}",
                                      "generation.model=m", "generation.concurrency=1", "generation.timeout_s=60"])
        proc = subprocess.Popen(cmd, env=_env(), cwd=dh.REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        try:
            deadline = time.time() + 240
            while len(chat.server.requests) <= 20:  # 20 answered, the 21st held
                assert proc.poll() is None and time.time() < deadline, proc.communicate()[1][-3000:]
                time.sleep(0.1)
            time.sleep(0.5)
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == code, err[-3000:]
    line = _one_line(err)
    assert line.startswith(f"stopped by {what}: what was saved is kept"), line
    saved = (out / "responses.jsonl").read_text().splitlines()
    assert len(saved) == 16, saved  # the first chunk, written before the stop


def test_ctrl_c_stops_a_command_that_inherited_sigint_ignored(capsys):
    """A command started with ``&`` by a script inherits SIGINT ignored; ``kill -INT`` must still stop it under the
    contract (one line, exit 130), and the ignored disposition is put back after."""
    import os
    import time

    from eval_hooks.cli_contract import run_with_contract

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        def main():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
            return 0

        assert run_with_contract(main) == 130
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
