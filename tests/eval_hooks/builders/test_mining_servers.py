"""mine-forks with endpoints that fail: a judge that is down is found before the generator runs, generator
replies are on disk as they arrive (a rerun reuses them), judges' raw replies are kept, and the command
ends with one ``error:`` line."""

import json

from eval_hooks.__main__ import main
from tests.chat_server import ChatServer, unused_port
from tests.taste_fakes import fake_reply, mining_corpus

ARGS = ["mine-forks", "--config", "conf/mine_forks.yaml"]


def _dead_url() -> str:
    return f"http://127.0.0.1:{unused_port()}"


def _data(tmp_path):
    p = tmp_path / "traj.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in mining_corpus()))
    return p


def test_a_judge_that_is_down_stops_the_run_before_the_generator(tmp_path, capsys):
    serve = lambda body, k: fake_reply(body["model"], body["messages"][-1]["content"])  # noqa: E731
    with ChatServer(serve) as srv:
        rc = main(ARGS + ["--trajectories", str(_data(tmp_path)), "--out", str(tmp_path / "m"),
                          f"generator.url={srv.url}", "generator.model=generator", f"judges.0.url={srv.url}",
                          "judges.0.model=j1", f"judges.1.url={_dead_url()}", "judges.1.model=j2",
                          "judges.1.max_retries=0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and err[0].startswith("error: chat endpoint at http://127.0.0.1:")
    assert "unreachable" in err[0] and "models (reachability check)" in err[0]
    assert srv.requests == []  # no generation request was made
    assert not (tmp_path / "m").exists()


def test_generator_replies_survive_a_judge_failure_and_judge_replies_are_kept(tmp_path, capsys):
    serve = lambda body, k: fake_reply(body["model"], body["messages"][-1]["content"])  # noqa: E731
    data = _data(tmp_path)
    with ChatServer(serve) as srv, ChatServer(serve) as judge2:
        judge2.fail_next = [400] * 1000  # reachable, but refuses every judging request
        common = [f"judges.0.url={srv.url}", "judges.0.model=j1", f"judges.1.url={judge2.url}", "judges.1.model=j2"]
        rc = main(ARGS + ["--trajectories", str(data), "--out", str(tmp_path / "a"), f"generator.url={srv.url}",
                          "generator.model=generator"] + common)
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 1 and len(err) == 1 and err[0].startswith("error: injected (HTTP 400 from ")
        saved = tmp_path / "a" / "generator_replies.jsonl"
        replies = [json.loads(l) for l in saved.read_text().splitlines()]
        assert len(replies) == sum(b["model"] == "generator" for b in srv.requests) == 13
        judge2.fail_next = []  # rerun with the generator gone: the saved replies are enough
        rc = main(ARGS + ["--trajectories", str(data), "--out", str(tmp_path / "b"), f"generator_replies={saved}",
                          f"generator.url={_dead_url()}", "generator.model=generator"] + common)
    assert rc == 0, capsys.readouterr().err
    stats = json.loads((tmp_path / "b" / "mining_stats.json").read_text())
    assert stats["recorded_replies_used"] == 13 and stats["funnel"]["released"] == 4
    cands = [json.loads(l) for l in (tmp_path / "b" / "candidates.jsonl").read_text().splitlines()]
    judged = [c for c in cands if "trivial_votes" in c]
    assert judged and all(set(c["trivial_judge_replies"]) == set(c["trivial_votes"]) and len(c["trivial_votes"]) == 2
                          for c in judged)
    assert all(isinstance(t, str) for c in judged for t in c["trivial_judge_replies"].values())
