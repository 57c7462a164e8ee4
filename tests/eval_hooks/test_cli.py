"""`python -m eval_hooks expand | score | build-gsm8k`: outputs, clean errors, non-zero exit, nothing half-written."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eval_hooks.__main__ import main

ROOT = Path(__file__).parents[2]
DATA = Path(__file__).parents[1] / "data" / "eval"


def _responses(rows_path: Path, out: Path, text="ANSWER: A") -> Path:
    with open(out, "w") as fh:
        for line in open(rows_path):
            fh.write(json.dumps({"row_id": json.loads(line)["row_id"], "response": text}) + "\n")
    return out


@pytest.mark.parametrize("family, n_rows", [("mist", 12), ("box2", 14), ("taste", 8), ("med", 8)])
def test_expand_then_score(tmp_path, capsys, family, n_rows):
    rows = tmp_path / "rows.jsonl"
    assert main(["expand", "--family", family, "--data", str(DATA / f"{family}_small.jsonl"), "--out", str(rows)]) == 0
    lines = [json.loads(l) for l in open(rows)]
    assert len(lines) == n_rows
    assert all({"row_id", "item_id", "condition", "prompt", "gold"} <= set(r) for r in lines)
    resp = _responses(rows, tmp_path / "resp.jsonl")
    out = tmp_path / "out"
    assert main(["score", "--family", family, "--rows", str(rows), "--responses", str(resp), "--out", str(out),
                 "--n-boot", "20"]) == 0
    assert {"metrics.json", "item_scores.jsonl", "report.md"} <= set(os.listdir(out))
    assert json.loads((out / "metrics.json").read_text())["n_rows"] == n_rows
    assert "wrote" in capsys.readouterr().out


def test_score_errors_are_clean_and_write_nothing(tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    main(["expand", "--family", "taste", "--data", str(DATA / "taste_small.jsonl"), "--out", str(rows)])
    resp = _responses(rows, tmp_path / "resp.jsonl")
    lines = resp.read_text().splitlines()
    out = tmp_path / "out"
    cases = {
        "dup": lines + [lines[0]],                                        # duplicate row id, line 9
        "unknown": lines + ['{"row_id": "nope", "response": "x"}'],       # unknown row id, line 9
        "missing": lines[:-1],                                            # one row without a response
        "malformed": lines[:3] + ['{"row_id": "t2/reversed", '] + lines[4:],
    }
    for name, content in cases.items():
        bad = tmp_path / f"{name}.jsonl"
        bad.write_text("\n".join(content) + "\n")
        capsys.readouterr()
        code = main(["score", "--family", "taste", "--rows", str(rows), "--responses", str(bad), "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 2, name
        assert err.startswith("error: ") and str(bad) in err and "Traceback" not in err, (name, err)
        assert ("malformed JSON" if name == "malformed" else "field 'row_id'") in err, (name, err)
        if name in ("dup", "unknown"):
            assert "line 9" in err
        if name == "malformed":
            assert "line 4" in err
        assert not out.exists()
    assert sorted(os.listdir(tmp_path)) == sorted(["rows.jsonl", "resp.jsonl"] + [f"{n}.jsonl" for n in cases])


def test_expand_error_exit_code_via_subprocess(tmp_path):
    bad = tmp_path / "items.jsonl"
    recs = [json.loads(l) for l in open(DATA / "mist_small.jsonl")]
    recs[6]["gold"] = "C"  # m2/correct disagrees with the other rows of m2
    bad.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = tmp_path / "rows.jsonl"
    proc = subprocess.run([sys.executable, "-m", "eval_hooks", "expand", "--family", "mist", "--data", str(bad),
                           "--out", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {bad}, line 7, field 'gold': ") and "Traceback" not in proc.stderr
    assert not out.exists()


def test_build_gsm8k_cli(tmp_path, gsm8k_path, capsys):
    out = tmp_path / "mist.jsonl"
    src = gsm8k_path
    assert main(["build-gsm8k", "--data", str(src), "--out", str(out), "--seed", "1", "--limit", "5",
                 "--shuffle"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["items"] == 5 and stats["rows"] == 20
    rows = tmp_path / "rows.jsonl"
    assert main(["expand", "--family", "mist", "--data", str(out), "--out", str(rows)]) == 0
    assert len(rows.read_text().splitlines()) == 20


def test_unknown_family_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as ei:
        main(["expand", "--family", "scope", "--data", "x", "--out", "y"])
    assert ei.value.code == 2 and "invalid choice" in capsys.readouterr().err
