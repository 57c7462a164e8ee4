"""launch/sweep.py and launch/sweeper/: expansion of Hydra sweep syntax, local runs (skip finished, keep going
past failures), summary table, SLURM array script. Uses a fake recipe written into tmp_path, not the real trainers."""

from __future__ import annotations

import csv
import json
import os
import stat
import subprocess
import sys
import signal
import textwrap
import time
from pathlib import Path

import pytest

from launch import sweep
from launch.sweeper.grid import build_jobs, expand
from launch.sweeper.jobs import SweepError
from launch.sweeper.naming import MAX_NAME_LEN

REPO = Path(__file__).resolve().parents[2]

# The fake recipe: parses key=value argv like Hydra would for simple values, appends one line per
# invocation to <run_dir>/../calls.txt, fails with exit 3 when fail=1, stops "early" (exit 0, no marker)
# when stop=1, otherwise writes metrics.jsonl and run_complete.json with metrics computed from the overrides.
FAKE_RECIPE = textwrap.dedent('''
    import json, sys
    from pathlib import Path
    kv = dict(a.split("=", 1) for a in sys.argv[1:])
    rd = Path(kv["trainer.run_dir"])
    rd.mkdir(parents=True, exist_ok=True)
    with open(rd.parent / "calls.txt", "a") as f:
        f.write(rd.name + "\\n")
    print("fake recipe got", sys.argv[1:], flush=True)
    if kv.get("fail") == "1":
        print("boom", flush=True)
        sys.exit(3)
    if kv.get("stop") == "1":
        sys.exit(0)
    beta, lam = float(kv.get("algo.beta", 0)), float(kv.get("algo.lambda_m", 0))
    steps = int(kv.get("trainer.max_steps", 2))
    m = {"loss": beta * 10 + lam, "reward_margin": beta - lam}
    with open(rd / "metrics.jsonl", "w") as f:
        for s in range(1, steps + 1):
            f.write(json.dumps({"step": s, **m}) + "\\n")
    (rd / "run_complete.json").write_text(json.dumps({"step": steps, "final_metrics": m}))
''')


@pytest.fixture
def fake_recipe(tmp_path):
    p = tmp_path / "fake_recipe.py"
    p.write_text(FAKE_RECIPE)
    return p


def _calls(sweep_dir: Path) -> list[str]:
    f = sweep_dir / "calls.txt"
    return f.read_text().split() if f.exists() else []


# ---------------------------------------------------------------------------------------------- expansion

def test_cartesian_product_names_and_run_dirs(tmp_path):
    jobs = build_jobs("recipes/dpo.py", "bl", tmp_path, [
        "algo.beta=0.05,0.1", "algo.lambda_m=0.25,0.5", "trainer.max_steps=7"])
    assert [j.swept for j in jobs] == [
        {"algo.beta": "0.05", "algo.lambda_m": "0.25"}, {"algo.beta": "0.05", "algo.lambda_m": "0.5"},
        {"algo.beta": "0.1", "algo.lambda_m": "0.25"}, {"algo.beta": "0.1", "algo.lambda_m": "0.5"}]
    assert [j.name for j in jobs] == ["beta-0.05__lambda_m-0.25", "beta-0.05__lambda_m-0.5",
                                      "beta-0.1__lambda_m-0.25", "beta-0.1__lambda_m-0.5"]
    assert len({j.run_dir for j in jobs}) == 4
    for j in jobs:
        assert j.run_dir == tmp_path.resolve() / "bl" / j.name
        assert j.command[0] == sys.executable and j.command[1] == "recipes/dpo.py"
        assert "trainer.max_steps=7" in j.command          # fixed override passed to every job
        assert j.command[-1] == f"trainer.run_dir={j.run_dir}"
        assert all(o in j.command for o in j.overrides)


def test_range_choice_quoted_commas_and_prefixes(tmp_path):
    fixed, combos, names = expand(["seed=range(1,4)", "lr=choice(1e-5,2e-5)", "msg='a, b',c",
                                         "+extra=1", "~dropme", "data.path=/x/y.jsonl"])
    assert fixed == ["+extra=1", "~dropme", "data.path=/x/y.jsonl"]
    assert len(combos) == 3 * 2 * 2
    assert sorted({c["seed"] for c in combos}) == ["1", "2", "3"]
    assert {c["lr"] for c in combos} == {"1e-05", "2e-05"}
    assert {c["msg"] for c in combos} == {"'a, b'", "c"}          # quoted value keeps its comma
    assert len(set(names)) == 12
    assert all(set(n) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-") for n in names)
    assert "seed-1__lr-1e-05__msg-a-b" in names


def test_range_with_step_and_no_sweep():
    _, combos, _ = expand(["x=range(0,10,4)"])
    assert [c["x"] for c in combos] == ["0", "4", "8"]
    fixed, combos, names = expand(["a=1"])
    assert fixed == ["a=1"] and combos == [{}] and names == ["base"]


def test_sanitising_collisions_get_distinct_names():
    _, combos, names = expand(["p='a/b','a b',a-b"])
    assert len(combos) == 3 and len(set(names)) == 3
    assert all(n.startswith("p-a-b") for n in names)


def test_same_last_component_uses_full_key():
    _, _, names = expand(["algo.beta=1,2", "model.beta=3,4"])
    assert names == ["algo.beta-1__model.beta-3", "algo.beta-1__model.beta-4",
                     "algo.beta-2__model.beta-3", "algo.beta-2__model.beta-4"]


def test_long_names_are_shortened_with_a_hash():
    _, _, names = expand([f"k=x{'y' * 200},z{'w' * 200}"])
    assert len(set(names)) == 2 and all(len(n) <= MAX_NAME_LEN for n in names)


@pytest.mark.parametrize("overrides, msg", [
    (["a=1,2", "a=3"], "already given"),
    (["trainer.run_dir=x,y"], "set by the sweep"),
    (["trainer.run_dir=x"], "set by the sweep"),
    (["lr=interval(0,1)"], "only discrete sweeps"),
    (["a=1,1"], "repeated values"),
    (["a=(("], "not valid Hydra override syntax"),
])
def test_bad_sweeps_are_refused_with_the_override_named(overrides, msg):
    with pytest.raises(SweepError, match=msg) as e:
        expand(overrides)
    assert repr(overrides[-1]) in str(e.value) or repr(overrides[0]) in str(e.value)


def test_accelerate_command(tmp_path):
    (job,) = build_jobs("recipes/dpo.py", "s", tmp_path, ["a=1"], accelerate_config="launch/ddp.yaml",
                              accelerate_args="--num_processes 8")
    assert job.command[:3] == [sys.executable, "-m", "accelerate.commands.launch"]
    assert job.command[3:8] == ["--config_file", "launch/ddp.yaml", "--num_processes", "8", "recipes/dpo.py"]
    with pytest.raises(SweepError, match="needs --accelerate-config"):
        build_jobs("r.py", "s", tmp_path, [], accelerate_args="--num_processes 8")
    with pytest.raises(SweepError, match="--name"):
        build_jobs("r.py", "bad/name", tmp_path, [])


def test_run_dir_with_odd_characters_is_hydra_quoted(tmp_path):
    out = tmp_path / "my sweeps,v1"
    (job,) = build_jobs("r.py", "s", out, [])
    assert job.command[-1] == "trainer.run_dir='" + str(out.resolve() / "s" / "base") + "'"
    from hydra.core.override_parser.overrides_parser import OverridesParser
    (ov,) = OverridesParser.create().parse_overrides([job.command[-1]])
    assert ov.value() == str(out.resolve() / "s" / "base") and not ov.is_sweep_override()


# ---------------------------------------------------------------------------------------------- local runs

def _main(*argv) -> int:
    return sweep.main([str(a) for a in argv])


def test_local_sweep_summary_and_skip_on_rerun(tmp_path, fake_recipe, capsys):
    out = tmp_path / "sweeps"
    args = ["--recipe", fake_recipe, "--name", "bl", "--out", out,
            "algo.beta=0.05,0.1", "algo.lambda_m=0.25,0.5", "trainer.max_steps=3"]
    assert _main(*args) == 0
    sd = out / "bl"
    assert sorted(_calls(sd)) == sorted(["beta-0.05__lambda_m-0.25", "beta-0.05__lambda_m-0.5",
                                         "beta-0.1__lambda_m-0.25", "beta-0.1__lambda_m-0.5"])
    for name in _calls(sd):
        log = (sd / name / "launch.log").read_text()
        assert "fake recipe got" in log and "exit code 0" in log

    with open(sd / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["job"] for r in rows] == ["beta-0.05__lambda_m-0.25", "beta-0.05__lambda_m-0.5",
                                        "beta-0.1__lambda_m-0.25", "beta-0.1__lambda_m-0.5"]
    r = rows[2]                      # beta=0.1, lambda_m=0.25: loss = 0.1*10 + 0.25, margin = 0.1 - 0.25
    assert (r["algo.beta"], r["algo.lambda_m"], r["status"], r["step"]) == ("0.1", "0.25", "done", "3")
    assert float(r["loss"]) == pytest.approx(1.25) and float(r["reward_margin"]) == pytest.approx(-0.15)
    assert float(rows[1]["loss"]) == pytest.approx(1.0)      # 0.05*10 + 0.5
    md = (sd / "summary.md").read_text()
    assert "4 jobs: 4 done, 0 failed, 0 missing" in md
    assert "| job | algo.beta | algo.lambda_m | status | step | loss | reward_margin | note |" in md
    assert "| beta-0.1__lambda_m-0.25 | 0.1 | 0.25 | done | 3 | 1.25 | -0.15 |  |" in md

    capsys.readouterr()
    assert _main(*args) == 0                                       # re-run: every job skipped
    printed = capsys.readouterr().out
    assert printed.count("skip ") == 4 and "already complete" in printed
    assert len(_calls(sd)) == 4                                    # nothing launched again


def test_failures_do_not_stop_the_sweep_and_rerun_retries_only_them(tmp_path, fake_recipe, capsys):
    out = tmp_path / "sweeps"
    args = ["--recipe", fake_recipe, "--name", "f", "--out", out, "fail=1,0", "algo.beta=1,2"]
    assert _main(*args) == 1
    sd = out / "f"
    assert len(_calls(sd)) == 4                                    # the jobs after the failures still ran
    rows = {r["job"]: r for r in csv.DictReader(open(sd / "summary.csv"))}
    assert rows["fail-1__beta-1"]["status"] == "failed" and "exit code 3" in rows["fail-1__beta-1"]["note"]
    assert rows["fail-0__beta-2"]["status"] == "done" and float(rows["fail-0__beta-2"]["loss"]) == 20.0
    assert rows["fail-1__beta-1"]["loss"] == ""
    text = capsys.readouterr().out
    assert "FAILED fail-1__beta-1" in text and "boom" in text      # log tail shown
    assert "2 done, 0 skipped, 2 failed" in text
    assert _main(*args) == 1                                       # re-run: only the failed ones again
    assert sorted(_calls(sd)[4:]) == ["fail-1__beta-1", "fail-1__beta-2"]
    assert (sd / "fail-1__beta-1" / "launch.log").read_text().count("launching fail-1__beta-1") == 2


def test_exit_zero_without_marker_is_not_done(tmp_path, fake_recipe):
    out = tmp_path / "sweeps"
    assert _main("--recipe", fake_recipe, "--name", "p", "--out", out, "stop=1,0") == 1
    rows = {r["job"]: r for r in csv.DictReader(open(out / "p" / "summary.csv"))}
    assert rows["stop-1"]["status"] == "failed" and "without run_complete.json" in rows["stop-1"]["note"]
    assert rows["stop-0"]["status"] == "done"


def test_summarize_only_reports_missing(tmp_path, fake_recipe):
    out = tmp_path / "sweeps"
    assert _main("--recipe", fake_recipe, "--name", "m", "--out", out, "--summarize-only", "a=1,2") == 0
    rows = list(csv.DictReader(open(out / "m" / "summary.csv")))
    assert [r["status"] for r in rows] == ["missing", "missing"]
    assert "2 jobs: 0 done, 0 failed, 2 missing" in (out / "m" / "summary.md").read_text()
    assert not _calls(out / "m")


def test_dry_run_prints_and_writes_nothing(tmp_path, fake_recipe, capsys):
    out = tmp_path / "sweeps"
    assert _main("--recipe", fake_recipe, "--name", "d", "--out", out, "--dry-run", "--env", "X=1",
                 "a=1,2") == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith("[sweep]")]
    assert len(lines) == 2 and all(ln.startswith("X=1 ") and str(fake_recipe) in ln for ln in lines)
    assert "a=1" in lines[0] and "a=2" in lines[1]
    assert not out.exists()


def test_env_is_passed_to_jobs(tmp_path):
    rec = tmp_path / "envrec.py"
    rec.write_text(textwrap.dedent('''
        import json, os, sys
        from pathlib import Path
        rd = Path(dict(a.split("=", 1) for a in sys.argv[1:])["trainer.run_dir"])
        rd.mkdir(parents=True, exist_ok=True)
        (rd / "run_complete.json").write_text(json.dumps({"step": 1, "final_metrics": {"v": os.environ["SWEEP_T"]}}))
    '''))
    assert _main("--recipe", rec, "--name", "e", "--out", tmp_path, "--env", "SWEEP_T=ok") == 0
    assert json.loads((tmp_path / "e" / "base" / "run_complete.json").read_text())["final_metrics"]["v"] == "ok"


# ---------------------------------------------------------------------------------------------- SLURM

def _fake_bin(tmp_path: Path) -> Path:
    """srun (drops its options, runs the rest), scontrol (records its arguments), python -> this interpreter."""
    b = tmp_path / "bin"
    b.mkdir()
    (b / "srun").write_text('#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\nexec "$@"\n')
    (b / "scontrol").write_text(f'#!/bin/bash\necho "$@" >> {tmp_path}/scontrol.txt\n'
                                'if [ "$1" = show ]; then echo localhost; fi\n')
    (b / "python").symlink_to(sys.executable)
    for f in ("srun", "scontrol"):
        (b / f).chmod((b / f).stat().st_mode | stat.S_IEXEC)
    return b


def test_slurm_script_content_and_manifest(tmp_path, fake_recipe):
    out = tmp_path / "sweeps"
    assert _main("--recipe", fake_recipe, "--name", "sl", "--out", out, "--launcher", "slurm",
                 "--accelerate-config", "launch/ddp.yaml", "--accelerate-args=--num_processes 8",
                 "--slurm-gpus", "8", "--slurm-partition", "gpu", "--slurm-max-parallel", "2",
                 "--slurm-setup", "source .venv/bin/activate", "--env", "HF_HUB_OFFLINE=1",
                 "algo.beta=0.05,0.1", "algo.lambda_m=0.25,0.5") == 0
    sd = out / "sl"
    script = (sd / "slurm" / "sweep.sbatch").read_text()
    for line in ("#SBATCH --array=0-3%2", "#SBATCH --requeue", "#SBATCH --signal=USR1@120",
                 "#SBATCH --gpus-per-node=8", "#SBATCH --partition=gpu", "#SBATCH --ntasks-per-node=1",
                 f"#SBATCH --output={sd.resolve()}/slurm/logs/%A_%a.out", "source .venv/bin/activate",
                 "export HF_HUB_OFFLINE=1", "srun ", "scontrol requeue", "run_complete.json"):
        assert line in script, line
    assert script.startswith("#!/bin/bash\n")
    assert subprocess.run(["bash", "-n", str(sd / "slurm" / "sweep.sbatch")]).returncode == 0
    manifest = (sd / "slurm" / "jobs.tsv").read_text().splitlines()
    jobs = json.loads((sd / "slurm" / "jobs.json").read_text())
    assert len(manifest) == 4 and [j["index"] for j in jobs] == [0, 1, 2, 3]
    for line, j in zip(manifest, jobs):
        name, run_dir, cmd = line.split("\t")
        assert (name, run_dir) == (j["job"], j["run_dir"])
        assert cmd.startswith("accelerate launch --config_file launch/ddp.yaml --num_processes 8 ")
        assert cmd.endswith(f"trainer.run_dir={run_dir}") and all(o in cmd for o in j["overrides"])
    assert not any(p.name == "calls.txt" for p in sd.iterdir())      # nothing was run


def test_slurm_array_task_runs_its_job_and_requeues_when_stopped_early(tmp_path, fake_recipe):
    out = tmp_path / "sweeps"
    assert _main("--recipe", fake_recipe, "--name", "sl", "--out", out, "--launcher", "slurm",
                 "stop=0,1", "algo.beta=2") == 0
    script = out / "sl" / "slurm" / "sweep.sbatch"
    env = {**os.environ, "PATH": f"{_fake_bin(tmp_path)}:{os.environ['PATH']}", "SLURM_ARRAY_JOB_ID": "77",
           "SLURM_JOB_NODELIST": "localhost"}
    for idx in (0, 1):
        r = subprocess.run(["bash", str(script)], env={**env, "SLURM_ARRAY_TASK_ID": str(idx)},
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    sd = out / "sl"
    assert json.loads((sd / "stop-0" / "run_complete.json").read_text())["final_metrics"]["loss"] == 20.0
    assert "fake recipe got" in (sd / "stop-0" / "launch.log").read_text()
    assert not (sd / "stop-1" / "run_complete.json").exists()
    assert "requeue 77_1" in (tmp_path / "scontrol.txt").read_text()   # only the early-stopped task
    assert "requeue 77_0" not in (tmp_path / "scontrol.txt").read_text()
    # a finished task is skipped when its array index runs again (e.g. after a requeue of the array)
    r = subprocess.run(["bash", str(script)], env={**env, "SLURM_ARRAY_TASK_ID": "0"},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "already complete" in r.stdout
    assert _calls(sd).count("stop-0") == 1
    # summarize-only after the SLURM run
    assert _main("--recipe", fake_recipe, "--name", "sl", "--out", out, "--summarize-only",
                 "stop=0,1", "algo.beta=2") == 0
    rows = {r["job"]: r for r in csv.DictReader(open(sd / "summary.csv"))}
    assert rows["stop-0"]["status"] == "done" and rows["stop-1"]["status"] == "failed"


def test_slurm_dry_run_writes_nothing(tmp_path, fake_recipe, capsys):
    out = tmp_path / "sweeps"
    assert _main("--recipe", fake_recipe, "--name", "sl", "--out", out, "--launcher", "slurm",
                 "--dry-run", "a=1,2") == 0
    text = capsys.readouterr().out
    assert "#SBATCH --array=0-1" in text and "a=2" in text
    assert not out.exists()


def test_sigterm_to_the_sweep_is_forwarded_and_stops_it(tmp_path):
    """SIGTERM to the sweep -> SIGTERM to the running job (which 'checkpoints' and exits 0); no more jobs."""
    rec = tmp_path / "sigrec.py"
    rec.write_text(textwrap.dedent('''
        import signal, sys, time
        from pathlib import Path
        rd = Path(dict(a.split("=", 1) for a in sys.argv[1:])["trainer.run_dir"])
        rd.mkdir(parents=True, exist_ok=True)
        got = []
        signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
        (rd / "started").write_text("")
        for _ in range(600):
            time.sleep(0.05)
            if got:
                (rd / "checkpointed").write_text("SIGTERM")
                sys.exit(0)
        sys.exit(5)
    '''))
    out = tmp_path / "sweeps"
    proc = subprocess.Popen([sys.executable, str(REPO / "launch" / "sweep.py"), "--recipe", str(rec),
                             "--name", "sig", "--out", str(out), "a=1,2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    started = out / "sig" / "a-1" / "started"
    deadline = time.time() + 60
    while not started.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert started.exists()
    proc.send_signal(signal.SIGTERM)
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, text
    assert (out / "sig" / "a-1" / "checkpointed").read_text() == "SIGTERM"
    assert not (out / "sig" / "a-2").exists()
    rows = {r["job"]: r["status"] for r in csv.DictReader(open(out / "sig" / "summary.csv"))}
    assert rows == {"a-1": "failed", "a-2": "missing"}
    assert "got SIGTERM" in text and "1 not run" in text


def test_metrics_option_limits_the_markdown_table_only(tmp_path, fake_recipe):
    out = tmp_path / "sweeps"
    assert _main("--recipe", fake_recipe, "--name", "mm", "--out", out, "--metrics", "reward_margin",
                 "algo.beta=1,2") == 0
    md = (out / "mm" / "summary.md").read_text()
    assert "| job | algo.beta | status | step | reward_margin | note |" in md
    assert "| beta-2 | 2 | done | 2 | 2 |  |" in md
    header = (out / "mm" / "summary.csv").read_text().splitlines()[0]
    assert header == "job,algo.beta,status,step,loss,reward_margin,run_dir,note"
