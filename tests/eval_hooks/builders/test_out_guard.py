"""Issue 59: a builder never eats its input, never overwrites a file it did not write (unless --overwrite), names
the directory when --out is one, and names a shortfall against --items and an overlong passage in one warning line."""

import json
import shutil
from pathlib import Path

import pytest

from eval_hooks.__main__ import main

SAMPLE = Path(__file__).resolve().parents[3] / "eval_hooks" / "data" / "nq_swap_sample.jsonl"
GSM = [{"question": f"Tom has {i} apples and buys 3 more. How many?", "answer": f"{i} + 3 = {i + 3}\n#### {i + 3}"}
       for i in range(2, 8)]


def _err_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.fixture
def nq(tmp_path):
    p = tmp_path / "X.jsonl"
    shutil.copy(SAMPLE, p)
    return p


def test_nq_swap_out_equal_to_data_is_refused(nq, capsys):
    before = nq.read_bytes()
    assert main(["build-nq-swap", "--data", str(nq), "--out", str(nq), "--items", "5"]) == 2
    line = _err_line(capsys)
    assert "input file" in line and str(nq) in line
    assert nq.read_bytes() == before


def test_out_equal_to_data_through_another_spelling_or_link(nq, tmp_path, capsys):
    before = nq.read_bytes()
    other = tmp_path / "sub"
    other.mkdir()
    assert main(["build-nq-swap", "--data", str(nq), "--out", str(other / ".." / "X.jsonl"), "--items", "5"]) == 2
    (tmp_path / "link.jsonl").symlink_to(nq)
    assert main(["build-nq-swap", "--data", str(nq), "--out", str(tmp_path / "link.jsonl"), "--items", "5",
                 "--overwrite"]) == 2
    assert nq.read_bytes() == before
    capsys.readouterr()


def test_gsm8k_out_equal_to_data_is_refused(tmp_path, capsys):
    data = tmp_path / "g.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in GSM))
    before = data.read_bytes()
    assert main(["build-gsm8k", "--data", str(data), "--out", str(data), "--overwrite"]) == 2
    assert "input file" in _err_line(capsys)
    assert data.read_bytes() == before


@pytest.mark.parametrize("cmd", ["build-nq-swap", "build-gsm8k"])
def test_unrelated_existing_out_is_refused_unless_overwrite(cmd, nq, tmp_path, capsys):
    data = nq
    if cmd == "build-gsm8k":
        data = tmp_path / "g.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in GSM))
    out = tmp_path / "notes.txt"
    out.write_text("my notes\n")
    assert main([cmd, "--data", str(data), "--out", str(out)]) == 2
    line = _err_line(capsys)
    assert "--overwrite" in line and str(out) in line
    assert out.read_text() == "my notes\n"
    assert main([cmd, "--data", str(data), "--out", str(out), "--overwrite"]) == 0
    assert json.loads(out.read_text().splitlines()[0])["condition"]
    # its own output is rewritten without --overwrite
    assert main([cmd, "--data", str(data), "--out", str(out)]) == 0


def test_med_out_equal_to_data_and_unrelated_out(tmp_path, capsys):
    data = tmp_path / "med.jsonl"
    data.write_text('{"question": "q"}\n')
    assert main(["build-medcounterfact", "--data", str(data), "--out", str(data)]) == 2
    assert "input file" in _err_line(capsys)
    out = tmp_path / "other.jsonl"
    out.write_text('{"mine": 1}\n')
    assert main(["build-medcounterfact", "--data", str(data), "--out", str(out)]) == 2
    assert "--overwrite" in _err_line(capsys)
    assert out.read_text() == '{"mine": 1}\n'


def test_out_an_existing_directory_names_the_directory(nq, tmp_path, capsys):
    d = tmp_path / "outdir"
    d.mkdir()
    assert main(["build-nq-swap", "--data", str(nq), "--out", str(d)]) == 2
    line = _err_line(capsys)
    assert str(d) in line and "directory" in line and ".tmp" not in line
    assert list(d.iterdir()) == []


def test_facts_dir_with_foreign_facts_files_is_refused(tmp_path, capsys):
    d = tmp_path / "facts"
    d.mkdir()
    (d / "facts_train.jsonl").write_text("mine\n")
    assert main(["build-facts", "--out", str(d)]) == 2
    assert "build_stats.json" in _err_line(capsys)
    assert (d / "facts_train.jsonl").read_text() == "mine\n"


def test_split_folds_into_a_dir_holding_its_input_is_refused(tmp_path, capsys):
    d = tmp_path / "folds"
    d.mkdir()
    data = d / "fold_0.jsonl"
    data.write_text('{"x": 1}\n')
    assert main(["split-folds", "--data", str(data), "--out", str(d), "--overwrite"]) == 2
    assert "input file" in _err_line(capsys)
    assert data.read_text() == '{"x": 1}\n'


def test_expand_out_equal_to_data_is_refused(nq, capsys):
    before = nq.read_bytes()
    assert main(["expand", "--family", "nq_swap", "--data", str(nq), "--out", str(nq)]) == 2
    assert "input file" in _err_line(capsys)
    assert nq.read_bytes() == before


def test_items_shortfall_is_one_warning(nq, tmp_path, capsys):
    out = tmp_path / "rows.jsonl"
    assert main(["build-nq-swap", "--data", str(nq), "--out", str(out), "--items", "1000"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning:") and "1000" in err[0] and "48" in err[0]


def test_overlong_passage_is_skipped_and_named(nq, tmp_path, capsys):
    recs = [json.loads(x) for x in nq.read_text().splitlines()]
    long = dict(recs[0])
    long["org_context"] = long["org_context"] + " filler" * 30_000
    nq.write_text("".join(json.dumps(r) + "\n" for r in [long, *recs[1:]]))
    out = tmp_path / "rows.jsonl"
    assert main(["build-nq-swap", "--data", str(nq), "--out", str(out)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning:") and "20000 words" in err[0] and "line(s) 1" in err[0]
    assert out.stat().st_size < 2_000_000


def test_mine_forks_into_a_folder_of_foreign_items_is_refused(tmp_path, capsys):
    d = tmp_path / "mined"
    d.mkdir()
    (d / "items.jsonl").write_text("mine\n")
    traj = tmp_path / "runs.jsonl"
    traj.write_text("{}\n")
    assert main(["mine-forks", "--trajectories", str(traj), "--out", str(d)]) == 2
    assert "mining_stats.json" in _err_line(capsys)
    assert (d / "items.jsonl").read_text() == "mine\n"
    assert main(["mine-forks", "--trajectories", str(d / "items.jsonl"), "--out", str(d), "--overwrite"]) == 2
    assert "input file" in _err_line(capsys)
