"""Issue 59: evidence that notices damage. ``--evidence DIR`` records the sha256 of every file (and of each run's
summary.json) in DIR/MANIFEST.json; ``--from-evidence`` refuses, in one line with exit 2, a folder whose files
differ from it; every committed evidence folder passes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.demos.test_real_pooled import _two_seeds

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted(p for p in (ROOT / "docs" / "evidence").iterdir() if p.is_dir())


@pytest.fixture
def folder(tmp_path, capsys):
    from demos.real.seeds import main

    ev = tmp_path / "ev"
    main([*map(str, _two_seeds(tmp_path)), "--out", str(tmp_path / "out"), "--n-boot", "20", "--evidence", str(ev)])
    capsys.readouterr()
    return ev


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "demos.real.seeds", *args], capture_output=True, text=True,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_the_manifest_records_each_summary_and_every_file(folder):
    m = json.loads((folder / "MANIFEST.json").read_text())
    runs = [f for f in sorted(m["files"]) if not f.endswith("/item_scores.jsonl.gz")]  # issue 60's per-item scores
    assert runs == ["pooled.json", "seed0/demo.json", "seed0/summary.json", "seed1/demo.json", "seed1/summary.json"]
    assert {f.split("/")[0] for f in m["files"] if f.endswith("/item_scores.jsonl.gz")} == {"seed0", "seed1"}
    assert sorted(m["summaries"]) == ["seed0", "seed1"]
    assert m["summaries"]["seed0"] == m["files"]["seed0/summary.json"]


@pytest.mark.parametrize("damage", ["truncated", "emptied", "edited", "removed", "added", "no_manifest"])
def test_from_evidence_refuses_a_damaged_folder_in_one_line(folder, damage):
    summary = folder / "seed1" / "summary.json"
    if damage == "truncated":
        summary.write_bytes(summary.read_bytes()[:100])
    elif damage == "emptied":
        summary.write_text("")
    elif damage == "edited":
        summary.write_text(summary.read_text().replace("0", "1", 1))
    elif damage == "removed":
        summary.unlink()
    elif damage == "added":
        (folder / "seed1" / "extra.json").write_text("{}")
    else:
        (folder / "MANIFEST.json").unlink()
    r = _cli("--from-evidence", str(folder), "--markdown")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(folder) in lines[0], r.stderr
    assert r.stdout == ""


def test_an_intact_folder_still_prints_its_table(folder):
    r = _cli("--from-evidence", str(folder), "--markdown")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Pooled over seeds 0, 1")


@pytest.mark.parametrize("ev", COMMITTED, ids=lambda p: p.name)
def test_every_committed_evidence_folder_matches_its_manifest(ev):
    from demos.real.evidence import check_manifest

    check_manifest(ev)
    assert json.loads((ev / "MANIFEST.json").read_text())["summaries"]
