"""A served evaluation keeps its work (issue 33, item 5): responses saved as they arrive and reused by a rerun,
finish reasons kept and counted, and no earlier ``metrics.json`` left looking current after a failure.
Loopback servers only (tests/chat_server.py)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from eval_hooks import run_matched_eval
from selectrust.generation.backends.openai_chat import OpenAIChatBackend
from selectrust.generation.backends.transport import ServerUnreachableError
from eval_hooks.evaluate import load_rows
from tests.chat_server import ChatServer

DATA = Path(__file__).parents[1] / "data" / "eval"


def _mist_items(tmp_path: Path, copies: int = 4) -> Path:
    """``copies`` renamed copies of the small MIST set (12 rows each), as one items file."""
    lines = [json.loads(line) for line in open(DATA / "mist_small.jsonl")]
    out = tmp_path / "items.jsonl"
    with open(out, "w") as fh:
        for c in range(copies):
            for rec in lines:
                fh.write(json.dumps({**rec, "item_id": f"{rec['item_id']}-{c}",
                                     "prompt": f"[{c}] {rec['prompt']}"}) + "\n")
    return out


class _Answers:
    """The server's answers: the gold of the row (read back from the prompt's item), failing from call ``fail_from``."""

    def __init__(self, fail_from: int | None = None):
        self.calls, self.fail_from, self.lock = 0, fail_from, threading.Lock()

    def __call__(self, body, k):
        with self.lock:
            self.calls += 1
            if self.fail_from is not None and self.calls > self.fail_from:
                raise RuntimeError("server fault")  # the handler dies: the connection closes without a reply
        return "ANSWER: 18"


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in open(path)]


def test_responses_are_saved_as_they_arrive_and_a_rerun_reuses_them(tmp_path, capsys):
    items, out = _mist_items(tmp_path), tmp_path / "eval"
    rows = load_rows("mist", items)
    assert len(rows) == 48
    with ChatServer(_Answers(fail_from=30)) as srv:
        backend = OpenAIChatBackend(srv.url, "m", max_retries=0, backoff_s=0.0, concurrency=4)
        with pytest.raises(ServerUnreachableError):
            run_matched_eval(backend, rows, "mist", out, progress=False, n_boot=20)
    saved = _lines(out / "responses.jsonl")
    assert 16 <= len(saved) <= 30  # whole chunks of 16 that finished before the fault
    assert all(r["samples"][0]["text"] == "ANSWER: 18" and r["row_id"] for r in saved)
    assert not (out / "metrics.json").exists()
    capsys.readouterr()

    port = int(srv.url.rsplit(":", 1)[1])
    with ChatServer(_Answers(), port=port) as srv:  # the server again, at the same URL
        backend = OpenAIChatBackend(srv.url, "m", max_retries=0, backoff_s=0.0, concurrency=4)
        m = run_matched_eval(backend, rows, "mist", out, progress=False, n_boot=20)
        assert len(srv.requests) == 48 - len(saved)  # only the rows without a saved response were sent
    err = capsys.readouterr().err
    assert f"{len(saved)} request(s) answered from saved responses, {48 - len(saved)} generated" in err
    assert m["n_rows"] == 48 and len(_lines(out / "item_scores.jsonl")) == 48
    assert len(_lines(out / "responses.jsonl")) == 48  # kept in the published set, one line per row

    with ChatServer(_Answers()) as srv:  # another model name: nothing is reused
        backend = OpenAIChatBackend(srv.url, "other", max_retries=0, backoff_s=0.0)
        run_matched_eval(backend, rows[:8], "mist", out, progress=False, n_boot=20)
        assert len(srv.requests) == 8
        backend = OpenAIChatBackend(srv.url, "other", max_retries=0, backoff_s=0.0)
        run_matched_eval(backend, rows[:8], "mist", out, progress=False, n_boot=20, max_new_tokens=7)
        assert len(srv.requests) == 16  # another budget: a different request, not reused


def test_a_failed_evaluation_leaves_no_earlier_metrics_looking_current(tmp_path, capsys):
    rows, out = load_rows("mist", DATA / "mist_small.jsonl"), tmp_path / "eval"
    with ChatServer(_Answers()) as srv:
        run_matched_eval(OpenAIChatBackend(srv.url, "m", max_retries=0), rows, "mist", out, progress=False,
                         n_boot=20)
    earlier = json.loads((out / "metrics.json").read_text())
    with ChatServer(_Answers(fail_from=0)) as srv:
        with pytest.raises(ServerUnreachableError):
            run_matched_eval(OpenAIChatBackend(srv.url, "m2", max_retries=0), rows, "mist", out, progress=False,
                             n_boot=20)
    assert not (out / "metrics.json").exists()
    assert json.loads((out / "metrics.previous.json").read_text()) == earlier
    assert "metrics.previous.json" in capsys.readouterr().err
    with ChatServer(_Answers()) as srv:
        run_matched_eval(OpenAIChatBackend(srv.url, "m2", max_retries=0), rows, "mist", out, progress=False,
                         n_boot=20)
    assert (out / "metrics.json").exists() and not (out / "metrics.previous.json").exists()


def test_null_content_and_length_finishes_are_kept_per_row_and_reported(tmp_path):
    rows, out = load_rows("mist", DATA / "mist_small.jsonl"), tmp_path / "eval"

    def null_and_cut(choices):
        for ch in choices:
            ch["message"]["content"], ch["finish_reason"] = None, "length"
        return choices

    with ChatServer(lambda body, k: "ANSWER: 18") as srv:
        srv.shape_choices = null_and_cut
        m = run_matched_eval(OpenAIChatBackend(srv.url, "m", max_retries=0), rows, "mist", out, progress=False,
                             n_boot=20)
    assert m["generation"] == {"n_null_content": 12, "n_finish_length": 12}
    assert any("12 of 12 rows got no content" in w for w in m["warnings"])
    assert any("12 of 12 rows stopped at the token budget" in w for w in m["warnings"])
    scores = _lines(out / "item_scores.jsonl")
    assert all(s["finish_reason"] == "length" and s["null_content"] and s["response"] == "" for s in scores)
    assert all(r["samples"][0]["finish_reason"] == "length" for r in _lines(out / "responses.jsonl"))
    assert json.loads((out / "metrics.json").read_text())["warnings"] == m["warnings"]


def test_hf_length_finishes_are_counted_and_changed_weights_are_never_reused(tiny_model, tiny_tokenizer, tmp_path):
    import torch

    from selectrust.generation.backends import HFBackend

    rows, out = load_rows("mist", DATA / "mist_small.jsonl")[:8], tmp_path / "eval"
    backend = HFBackend(tiny_model, tiny_tokenizer, batch_size=8)
    m = run_matched_eval(backend, rows, "mist", out, max_new_tokens=2, progress=False, n_boot=20)
    cut = sum(s["finish_reason"] == "length" for s in _lines(out / "item_scores.jsonl"))
    assert cut > 0 and m["generation"]["n_finish_length"] == cut
    assert any(f"{cut} of 8 rows stopped at the token budget (max_new_tokens=2)" in w for w in m["warnings"])

    calls = []
    real = backend.generate
    backend.generate = lambda reqs, **kw: calls.append(len(reqs)) or real(reqs, **kw)
    again = run_matched_eval(backend, rows, "mist", out, max_new_tokens=2, progress=False, n_boot=20)
    assert calls == [] and again["overall"] == m["overall"]  # same weights: every response reused
    with torch.no_grad():
        next(tiny_model.parameters()).add_(1e-3)
    try:
        run_matched_eval(backend, rows, "mist", out, max_new_tokens=2, progress=False, n_boot=20)
    finally:
        with torch.no_grad():
            next(tiny_model.parameters()).sub_(1e-3)
    assert calls == [8]  # changed weights: generated again


def test_vllm_server_length_finishes_are_counted_and_a_rerun_reuses_them(tiny_model_dir, tiny_tokenizer, tmp_path,
                                                                       capsys):
    from selectrust.generation.backends.vllm_server import VLLMServerBackend
    from tests.vllm_helpers import reference_server

    rows, out = load_rows("mist", DATA / "mist_small.jsonl")[:8], tmp_path / "eval"
    srv = reference_server(tiny_model_dir, tiny_tokenizer)
    try:
        backend = VLLMServerBackend(srv.url, "tiny", tiny_tokenizer, max_retries=0, server_kind="vllm")
        m = run_matched_eval(backend, rows, "mist", out, max_new_tokens=2, progress=False, n_boot=20)
        cut = sum(s["finish_reason"] == "length" for s in _lines(out / "item_scores.jsonl"))
        assert cut > 0 and m["generation"]["n_finish_length"] == cut
        assert any(f"{cut} of 8 rows stopped at the token budget" in w for w in m["warnings"])
        capsys.readouterr()
        again = run_matched_eval(VLLMServerBackend(srv.url, "tiny", tiny_tokenizer, max_retries=0,
                                                   server_kind="vllm"),
                                 rows, "mist", out, max_new_tokens=2, progress=False, n_boot=20)
    finally:
        srv.shutdown()
    assert "8 request(s) answered from saved responses, 0 generated" in capsys.readouterr().err
    assert again["overall"] == m["overall"] and again["generation"] == m["generation"]


def test_a_torn_last_line_is_skipped_and_the_next_record_starts_on_its_own_line(tmp_path):
    rows, out = load_rows("mist", DATA / "mist_small.jsonl")[:4], tmp_path / "eval"
    with ChatServer(_Answers()) as srv:
        run_matched_eval(OpenAIChatBackend(srv.url, "m", max_retries=0), rows, "mist", out, progress=False, n_boot=20)
        path = out / "responses.jsonl"
        text = path.read_text().splitlines(keepends=True)
        path.write_text("".join(text[:3]) + text[3][:20])  # the fourth record torn mid-write
        run_matched_eval(OpenAIChatBackend(srv.url, "m", max_retries=0), rows, "mist", out, progress=False, n_boot=20)
        assert len(srv.requests) == 5  # the three whole records reused, the torn one asked again
    lines = path.read_text().splitlines()
    assert len(lines) == 5 and json.loads(lines[4])["row_id"] == rows[3]["row_id"]
