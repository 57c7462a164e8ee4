"""`launch/multinode.py` under the error contract (issue 59): a bad argument (node counts and ranks out of range, a
port out of range or in use, a recipe that does not exist) is one line ``error: ...`` naming the flag and its bound,
exit 2, before any node starts; a rank's own one-line error is what the launcher prints (once, with no agent
traceback) and returns (2); one node failing ends the whole local launch within a bounded time.

The launches use tiny fake recipes (a few lines that print ``error: ...`` and exit 2, crash, or sleep), not training:
each takes a few seconds.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from launch import multinode as mn

REPO = Path(__file__).resolve().parents[2]
LINE = "error: optim.lr must be a finite number"
AGENT_NOISE = ("Traceback", "ChildFailedError", "elastic/multiprocessing", "Root Cause", "SignalException")


def _main(capsys, *argv):
    rc = mn.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def _one_line_refusal(rc, out, err, *words):
    assert rc == 2, (rc, out, err)
    assert out == "", out                                  # nothing printed, nothing started
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def _recipe(tmp_path: Path, body: str, name: str = "fake_recipe.py") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


def _launch(*argv, timeout=120):
    t0 = time.time()
    r = subprocess.run([sys.executable, "launch/multinode.py", *argv], cwd=REPO, capture_output=True, text=True,
                       timeout=timeout, env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})
    return r, time.time() - t0


# -- bad arguments: one line, exit 2, nothing started ---------------------------------------------------------------
@pytest.mark.parametrize("argv, words", [
    (["local", "--nodes", "0"], ["--nodes", "1 and 16"]),
    (["local", "--nodes", "-2"], ["--nodes", "1 and 16"]),
    (["local", "--dry-run", "--nodes", "100000"], ["--nodes", "1 and 16", "sbatch"]),
    (["sbatch", "--nodes", "-1", "--procs-per-node", "-4"], ["--nodes", "1 and 1024"]),
    (["sbatch", "--nodes", "2", "--procs-per-node", "-4"], ["--procs-per-node", "1 and 64"]),
    (["sbatch", "--nodes", "100000"], ["--nodes", "1 and 1024"]),
    (["command", "--node-rank", "5", "--nodes", "2", "--master-addr", "node0"], ["--node-rank", "0 and 1", "5"]),
    (["command", "--node-rank", "-1", "--master-addr", "node0"], ["--node-rank", "0 and 1"]),
    (["command", "--node-rank", "one", "--master-addr", "node0"], ["--node-rank", "$SLURM_NODEID"]),
    (["command", "--node-rank", "0", "--master-addr", "node0", "--procs-per-node", "0"],
     ["--procs-per-node", "1 and 64"]),
    (["local", "--stop-after", "-1"], ["--stop-after"]),
    (["local", "--stop-after", "nan"], ["--stop-after"]),
    (["local", "--dry-run", "--procs-per-node", "0"], ["--procs-per-node", "1 and 64"]),
    (["local", "--dry-run", "--port", "-1"], ["--port", "1 and 65535"]),
    (["sbatch", "--port", "70000"], ["--port", "1 and 65535"]),
    (["command", "--node-rank", "0", "--master-addr", "node0", "--port", "0"], ["--port", "1 and 65535"]),
])
def test_out_of_range_arguments_are_one_line_exit_2(capsys, argv, words):
    _one_line_refusal(*_main(capsys, *argv, "--device", "cpu", "--", "recipes/dpo.py"), *words)


def test_a_shell_variable_is_still_a_node_rank(capsys):
    rc, out, err = _main(capsys, "command", "--node-rank", "$SLURM_NODEID", "--master-addr", "node0", "--",
                         "recipes/dpo.py")
    assert rc == 0 and "--machine_rank '$SLURM_NODEID'" in out, err


@pytest.mark.parametrize("mode", [["local", "--dry-run"], ["command", "--node-rank", "0", "--master-addr", "n0"],
                                  ["sbatch"]])
@pytest.mark.parametrize("recipe", ["recipes/nosuch.py", "recipes"])
def test_the_recipe_must_exist_in_every_mode(capsys, mode, recipe):
    _one_line_refusal(*_main(capsys, *mode, "--", recipe, "trainer.run_dir=runs/x"), recipe, "recipe")


def test_local_refuses_a_missing_recipe_at_once():
    r, took = _launch("local", "--device", "cpu", "--", "recipes/nosuch.py", timeout=90)
    _one_line_refusal(r.returncode, r.stdout, r.stderr, "recipes/nosuch.py")
    assert took < 30, took


def test_another_config_file_must_exist(capsys):
    _one_line_refusal(*_main(capsys, "sbatch", "--config", "launch/nosuch.yaml", "--", "recipes/dpo.py"),
                      "--config", "launch/nosuch.yaml")


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_a_port_in_use_is_refused_before_the_nodes_start(tmp_path, host):
    recipe = _recipe(tmp_path, "print('trained')\n")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        s.listen()
        port = s.getsockname()[1]
        try:
            r, took = _launch("local", "--device", "cpu", "--port", str(port), "--", str(recipe), timeout=60)
        except subprocess.TimeoutExpired as e:  # today: node 0 fails on the port, node 1 waits until killed
            pytest.fail(f"the launch did not end within 60 s: {(e.stdout or b'')[-2000:]!r}")
    line = _one_line_refusal(r.returncode, r.stdout, r.stderr, f"--port {port}", "in use")
    assert took < 30, took
    assert "\n" not in line


# -- a rank's own error ---------------------------------------------------------------------------------------------
FAIL_ON_EVERY_RANK = f"""\
    import sys
    print("starting", flush=True)
    print({LINE!r}, file=sys.stderr, flush=True)
    sys.exit(2)
"""


def test_a_ranks_one_line_error_is_the_launchers_line_and_exit_2(tmp_path):
    recipe = _recipe(tmp_path, FAIL_ON_EVERY_RANK)
    r, took = _launch("local", "--device", "cpu", "--", str(recipe), "optim.lr=nan")
    assert r.returncode == 2, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stderr.strip().splitlines() == [LINE], r.stderr          # once, though both nodes said it
    assert LINE not in r.stdout
    for noise in AGENT_NOISE:
        assert noise not in r.stdout + r.stderr, (noise, r.stdout[-3000:])
    assert "[node0] starting" in r.stdout and "[node1] starting" in r.stdout   # the ranks' other output stays
    assert "[multinode] exit codes by node: [2, 2]" in r.stdout


def test_a_ranks_crash_keeps_its_own_traceback_not_the_agents(tmp_path):
    recipe = _recipe(tmp_path, """\
        def train():
            raise ValueError("a bug in the recipe")
        train()
    """)
    r, _ = _launch("local", "--device", "cpu", "--", str(recipe))
    assert r.returncode == 1, r.stdout[-3000:]
    assert "ValueError: a bug in the recipe" in r.stdout and "in train" in r.stdout   # the rank's traceback
    assert "ChildFailedError" not in r.stdout + r.stderr and "Root Cause" not in r.stdout
    assert "[multinode] exit codes by node: [1, 1]" in r.stdout


def test_one_failing_node_ends_the_whole_local_launch(tmp_path):
    """Node 0's rank refuses its input; node 1's rank would wait forever (as a rank blocked in a collective, or an
    agent waiting at the rendezvous, does): the launcher stops it and reports node 0's line, exit 2."""
    recipe = _recipe(tmp_path, f"""\
        import os, sys, time
        if os.environ["RANK"] == "0":
            print({LINE!r}, file=sys.stderr, flush=True)
            sys.exit(2)
        time.sleep(600)
    """)
    try:
        r, took = _launch("local", "--device", "cpu", "--", str(recipe), timeout=120)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"node 1 still ran 120 s after node 0 failed: {(e.stdout or b'')[-2000:]!r}")
    assert r.returncode == 2, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stderr.strip().splitlines() == [LINE], r.stderr
    assert "node 0 failed" in r.stdout and "stopping" in r.stdout
    for noise in AGENT_NOISE:
        assert noise not in r.stdout + r.stderr, (noise, r.stdout[-3000:])
    assert took < 60, took


def test_readme_answers_the_contract_for_the_launcher_and_torchrun():
    text = (REPO / "launch" / "README.md").read_text()
    for phrase in ("exit 2", "ChildFailedError", "torchrun", "--stop-after", "in use", "1024"):
        assert phrase in text, phrase
