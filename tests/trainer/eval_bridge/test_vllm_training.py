"""Trainers on the vLLM server protocol (issue 5): the real recipes, in-process, against the loopback
reference server on the tiny model. GRPO rollouts and adapter hot-sync through HTTP, the sync probe,
the rollout/trainer importance-sampling correction, faults (stale adapter, dropped connections,
malformed replies, refused adapter, dead server) and a DPO run's epoch-end evaluation through the server.

The reward functions below are reached by the recipe as ``tests.trainer.eval_bridge.test_vllm_training:<name>``; the tests
set ``ON_REWARD`` on *that* module object (``_hooks()``), so a fault can be injected at an exact point
of a run (e.g. during the rewards of step 2).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from guards import fails_after
from recipe_utils import read_metrics, run_recipe

ON_REWARD = None  # set on the module the recipe imports: callable(call_index) run before each reward

_calls = {"n": 0}


def hook_reward(completion: str, row: dict) -> float:
    _calls["n"] += 1
    if ON_REWARD is not None:
        ON_REWARD(_calls["n"])
    return float(len(set(completion)) % 2)  # has variance under a random-init model (not an outcome reward)


def _hooks():
    mod = importlib.import_module("tests.trainer.eval_bridge.test_vllm_training")
    mod._calls["n"] = 0
    return mod


G, P = 2, 2  # group size, prompts per step: batch_size 4 x grad_accum 1 x world 1 = 4 samples
THRESHOLD = 1e-3


def _overrides(run_dir: Path, url: str, *extra: str) -> list[str]:
    return [f"trainer.run_dir={run_dir}", "trainer.progress=false", "eval=none", f"algo.group_size={G}",
            f"algo.prompts_per_step={P}", f"optim.batch_size={G * P}", "optim.grad_accum=1", "algo.max_new_tokens=3",
            "algo.drop_zero_variance=false", "algo.reward=tests.trainer.eval_bridge.test_vllm_training:hook_reward",
            "optim.scheduler=constant", "optim.warmup_ratio=0", "optim.lr=0.05",
            "generation=vllm_server", f"generation.url={url}", "generation.served_model_name=tiny",
            f"generation.probe_threshold={THRESHOLD}", "generation.timeout_s=20", *extra]


@pytest.fixture(autouse=True)
def _one_thread():
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
    _hooks().ON_REWARD = None


@pytest.fixture()
def server(tiny_model_dir, tiny_tokenizer):
    """Reference server on the tiny base model; records the body of every /v1/completions request."""
    from vllm_helpers import reference_server

    srv = reference_server(tiny_model_dir, tiny_tokenizer)
    srv.completions = []
    inner = srv._completions

    def recording(body):
        srv.completions.append(body)
        return inner(body)

    srv._completions = recording
    yield srv
    srv.shutdown()


@pytest.fixture()
def no_local_generation(monkeypatch):
    """The trainer must not generate in-process (the reference server itself uses ``_generate_batch``)."""
    from selectrust.generation.backends.hf import HFBackend

    def refuse(self, *a, **k):
        raise AssertionError("HFBackend.generate called: generation did not go through the server")

    monkeypatch.setattr(HFBackend, "generate", refuse)


def _sampling(server) -> list[dict]:
    return [b for b in server.completions if b.get("logprobs") is not None]


def _served_name(line: dict) -> str:
    return f"policy-{line['adapter_version']}-{line['adapter_checksum'][:12]}"


def test_grpo_rollouts_and_adapter_sync_every_step_through_http(tmp_path, server, no_local_generation):
    from selectrust.generation.backends.adapter_checksum import adapter_checksum

    run = tmp_path / "run"
    run_recipe("grpo", "grpo", _overrides(run, server.url, "trainer.max_steps=2", "generation.sync_every=1",
                                          "algo.is_correction=token", "algo.is_cap=2.0"))
    lines = read_metrics(run)
    assert [l["step"] for l in lines] == [1, 2]
    assert [l["adapter_version"] for l in lines] == ["s0", "s1"]
    for l in lines:
        # the checksum logged is the checksum of the adapter directory that was loaded
        assert l["adapter_checksum"] == adapter_checksum(run / "adapters" / f"adapter-{l['adapter_version']}")
        assert 0.0 <= l["probe_mean_abs_dlogp"] < THRESHOLD and l["probe_tokens"] > 10
        # on-policy, same engine: rollout log-probs equal the trainer's token for token (alignment check)
        assert l["is_logp_abs_diff_mean"] < 1e-5 and l["is_weight_mean"] == pytest.approx(1.0, abs=1e-4)
    assert lines[0]["adapter_checksum"] != lines[1]["adapter_checksum"]
    assert lines[1]["probe_trainer_shift"] > 10 * THRESHOLD  # the weights moved: the probe was informative

    # rollouts went through HTTP, one call per prompt (its own seed; n=G), each to that step's adapter
    calls = _sampling(server)
    assert [c["model"] for c in calls] == [_served_name(l) for l in lines for _ in range(P)]
    assert all(c["n"] == G and len(c["prompt"]) == 1 and c["max_tokens"] == 3 for c in calls)
    assert len({c["seed"] for c in calls}) == len(calls)
    # the old version was unloaded; only the newest adapter is still served
    assert set(server._paths) == {_served_name(lines[1])}


def test_sync_every_k_steps_and_is_correction_of_stale_rollouts(tmp_path, server):
    """sync_every=2: step 2 samples from the step-0 adapter while the trainer is at step 1, so the rollout
    log-probs now differ from the trainer's and the truncated IS weights move away from 1."""
    run = tmp_path / "run"
    run_recipe("grpo", "grpo", _overrides(run, server.url, "trainer.max_steps=3", "generation.sync_every=2",
                                          "algo.is_correction=sequence", "algo.is_cap=1.5"))
    lines = read_metrics(run)
    assert [l["adapter_version"] for l in lines] == ["s0", "s0", "s2"]  # every line names its weights
    assert "probe_mean_abs_dlogp" in lines[0] and "probe_mean_abs_dlogp" not in lines[1]
    assert lines[2]["probe_mean_abs_dlogp"] < THRESHOLD
    assert [c["model"] for c in _sampling(server)] == [_served_name(l) for l in lines for _ in range(P)]
    fresh, stale = lines[0], lines[1]
    assert fresh["is_logp_abs_diff_mean"] < 1e-5 and lines[2]["is_logp_abs_diff_mean"] < 1e-5
    assert stale["is_logp_abs_diff_mean"] > 1e-3
    assert stale["is_ratio_mean"] != pytest.approx(1.0, abs=1e-4)
    # truncation: mean weight <= min(mean ratio, cap); equal to the ratio only when nothing was capped
    assert stale["is_weight_mean"] <= min(stale["is_ratio_mean"], 1.5) + 1e-6
    if stale["is_frac_capped"] == 0:
        assert stale["is_weight_mean"] == pytest.approx(stale["is_ratio_mean"], rel=1e-5)


def test_probe_catches_a_stale_adapter_and_checkpoints(tmp_path, server):
    from trainer.runtime.checkpoint import complete_checkpoints
    from trainer.eval_bridge.weight_sync import StaleWeightsError

    def arm(i):  # during step 1's rewards: the next load (step-1 sync) is acknowledged but not applied
        if i == 1:
            server.faults.stale_adapter_loads = 1

    _hooks().ON_REWARD = arm
    run = tmp_path / "run"
    with pytest.raises(StaleWeightsError, match="stale or wrong weights") as e:
        run_recipe("grpo", "grpo", _overrides(run, server.url, "trainer.max_steps=3"))
    assert e.value.metrics["probe_mean_abs_dlogp"] > THRESHOLD
    lines = read_metrics(run)
    assert [l["step"] for l in lines] == [1, 2] and lines[1]["sync_failed"] == 1
    assert lines[1]["probe_mean_abs_dlogp"] == pytest.approx(e.value.metrics["probe_mean_abs_dlogp"])
    assert [p.name for p in complete_checkpoints(run / "checkpoints")] == ["step_1"]
    assert len(_sampling(server)) == P  # step 1's calls (one per prompt); nothing with the stale weights


def test_retries_after_dropped_connections_lost_replies_and_503(tmp_path, server):
    server.faults.drop_connections = 1  # the first adapter load: connection closed without a reply
    server.faults.lose_replies = 1      # its retry: loaded, reply lost -> the next retry sees "already loaded"
    server.faults.server_errors = 1     # the first rollout: HTTP 503
    run = tmp_path / "run"
    run_recipe("grpo", "grpo", _overrides(run, server.url, "trainer.max_steps=1", "generation.max_retries=3"))
    assert (server.faults.drop_connections, server.faults.lose_replies, server.faults.server_errors) == (0, 0, 0)
    (line,) = read_metrics(run)
    assert line["probe_mean_abs_dlogp"] < THRESHOLD and line["adapter_version"] == "s0"
    assert (run / "run_complete.json").exists()


@pytest.mark.parametrize("fault, match", [
    ("malformed_json", r"malformed JSON from .*/v1/completions for POST /v1/completions \(model='policy-s0-\w+', "
                       rf"1 prompt\(s\) x n={G}, max_tokens=3, first prompt"),
    ("fewer_samples", rf"POST /v1/completions \(model='policy-s0-\w+', 1 prompt\(s\) x n={G}.*: asked for "
                      rf"{G} samples \(1 prompts x n={G}\), server returned {G - 1}"),
])
def test_bad_rollout_replies_are_errors_naming_the_request(tmp_path, server, fault, match):
    from selectrust.generation.backends.vllm_server import ServerResponseError
    from trainer.runtime.checkpoint import complete_checkpoints

    def arm(i):  # during step 1's rewards; step 2 does not sync (sync_every=2), so its rollout gets the fault
        if i == 1:
            setattr(server.faults, fault, 1)

    _hooks().ON_REWARD = arm
    run = tmp_path / "run"
    with pytest.raises(ServerResponseError, match=match):
        run_recipe("grpo", "grpo", _overrides(run, server.url, "trainer.max_steps=2", "generation.sync_every=2"))
    assert [l["step"] for l in read_metrics(run)] == [1]
    assert [p.name for p in complete_checkpoints(run / "checkpoints")] == ["step_1"]
    # step 1: P calls (one per prompt); step 2: the faulty call and at most its P - 1 concurrent siblings,
    # the faulty one not retried (a retry would make it 2 P + 1)
    assert P < len(_sampling(server)) <= 2 * P


def test_adapter_load_failure_stops_never_falls_back_to_base(tmp_path, server):
    from selectrust.generation.backends.vllm_server import AdapterLoadError

    server.faults.fail_adapter_loads = 1
    with pytest.raises(AdapterLoadError, match="Refusing to continue with the previous or base weights"):
        run_recipe("grpo", "grpo", _overrides(tmp_path / "run", server.url, "trainer.max_steps=1"))
    assert server.completions == [] and server._paths == {}  # not one request went to the base model


def test_dead_server_saves_checkpoint_and_fails_with_its_last_log_lines(tmp_path, tiny_model_dir):
    """A server *process* (launch/vllm_launcher.py, reference kind) is killed during step 2; the next request
    (the step-2 sync) fails fast with the URL and the server log's last lines; step 2 is checkpointed."""
    from selectrust.generation.backends.vllm_server import ServerUnreachableError
    from launch.vllm_launcher import VLLMServer
    from trainer.runtime.checkpoint import complete_checkpoints

    log = tmp_path / "server.log"
    srv = VLLMServer(str(tiny_model_dir), kind="reference", log_path=log, served_model_name="tiny",
                     startup_timeout_s=120)
    srv.start()
    try:
        def kill(i):  # first reward of step 2 (one generation round per step)
            if i == P * G + 1:
                srv.proc.kill()
                srv.proc.wait(10)

        _hooks().ON_REWARD = kill
        run = tmp_path / "run"
        with fails_after(600, "GRPO against a dead server"), pytest.raises(ServerUnreachableError) as e:
            run_recipe("grpo", "grpo", _overrides(run, srv.url, "trainer.max_steps=4", "generation.max_retries=1",
                                                  f"generation.server_log={log}"))
    finally:
        srv.stop()
    msg = str(e.value)
    assert srv.url in msg and "unreachable" in msg and "after 2 attempts" in msg   # max_retries=1: no endless retry
    assert str(log) in msg and "reference_server: listening on" in msg  # the server's last log lines
    assert [p.name for p in complete_checkpoints(run / "checkpoints")] == ["step_2"]
    assert [l["step"] for l in read_metrics(run)] == [1, 2]
    state = json.loads((run / "checkpoints" / "step_2" / "trainer_state.json").read_text())
    assert state["source"]["optimizer_steps"] == 2 and state["source"]["rollout_index"] == 2

    # a restarted server (new port: generation.url may change on resume) lets the run finish from step 2
    from selectrust.generation.backends.reference_server import ReferenceServer
    from selectrust.model import load_model, load_tokenizer

    _hooks().ON_REWARD = None
    with ReferenceServer(load_model(str(tiny_model_dir)), load_tokenizer(str(tiny_model_dir)),
                         model_name="tiny") as again:
        result = run_recipe("grpo", "grpo", _overrides(run, again.url, "trainer.max_steps=4",
                                                       "generation.max_retries=1", f"generation.server_log={log}"))
    assert result.step == 4 and (run / "run_complete.json").exists()
    lines = read_metrics(run)
    assert [l["step"] for l in lines] == [1, 2, 3, 4] and [l["adapter_version"] for l in lines[2:]] == ["s2", "s3"]


def test_dpo_epoch_end_eval_through_the_server_on_the_current_adapter(tmp_path, server, no_local_generation):
    run = tmp_path / "dpo"
    run_recipe("dpo", "dpo", [f"trainer.run_dir={run}", "trainer.progress=false", "trainer.max_steps=2",
                              "optim.batch_size=2", "optim.lr=0.05", "optim.scheduler=constant",
                              "optim.warmup_ratio=0", "eval.max_rows=8", "eval.max_new_tokens=2",
                              "generation=vllm_server", f"generation.url={server.url}",
                              "generation.served_model_name=tiny", f"generation.probe_threshold={THRESHOLD}"])
    info = json.loads((run / "eval" / "final" / "adapter_sync.json").read_text())
    assert info["adapter_version"] == "s2" and info["probe_mean_abs_dlogp"] < THRESHOLD
    # the evaluated adapter is the trained one, byte for byte
    synced = Path(info["adapter_path"]) / "adapter_model.safetensors"
    assert synced.read_bytes() == (run / "final" / "adapter_model.safetensors").read_bytes()
    calls = _sampling(server)
    metrics = json.loads((run / "eval" / "final" / "metrics.json").read_text())
    assert [c["model"] for c in calls] == [info["served_adapter"]] and info["served_adapter"].startswith("eval-s2-")
    assert len(calls[0]["prompt"]) == 8 and calls[0]["temperature"] == 0.0
    assert metrics["eval_settings"]["backend"] == "vllm_server"
    evals = [l for l in read_metrics(run) if "eval_epoch" in l]
    assert evals and evals[-1]["eval/adapter_sync.probe_mean_abs_dlogp"] < THRESHOLD


def test_server_eval_refuses_a_policy_without_lora(tmp_path, server):
    from selectrust.core.errors import ConfigError

    with pytest.raises(ConfigError, match="needs a LoRA policy"):
        run_recipe("sft", "sft", [f"trainer.run_dir={tmp_path / 'sft'}", "trainer.progress=false",
                                  "trainer.max_steps=1", "model.lora.enabled=false", "generation=vllm_server",
                                  f"generation.url={server.url}", "generation.served_model_name=tiny"])
    assert server.completions == []


def test_a_server_that_stops_answering_fails_within_the_timeout(tmp_path, server):
    from selectrust.generation.backends.vllm_server import ServerUnreachableError

    server.faults.slow_requests, server.faults.delay_s = 2, 30.0  # the adapter load and its retry hang
    # both attempts timed out (each would be answered after 30 s): a request without a timeout fails the guard
    with fails_after(300, "GRPO against a server that stops answering"), \
            pytest.raises(ServerUnreachableError, match=r"unreachable \(\w+: .*timed out.*\) for .*load_lora_adapter.* "
                                                        r"after 2 attempts"):
        run_recipe("grpo", "grpo", _overrides(tmp_path / "run", server.url, "trainer.max_steps=1",
                                              "generation.timeout_s=0.5", "generation.max_retries=1"))
    assert server.faults.slow_requests == 0                     # both slow requests were made


@pytest.mark.slow
def test_grpo_two_ranks_main_process_syncs_others_follow(tmp_path, server):
    """2-rank CPU DDP against one server: only rank 0 loads adapters (one load per step); both ranks'
    rollouts go to that step's adapter; every metrics line names it."""
    import dist_helpers as dh

    loads = []
    inner = server._load_lora
    server._load_lora = lambda body: (loads.append(body["lora_name"]), inner(body))[1]
    run = tmp_path / "ddp"
    over = [o for o in _overrides(run, server.url, "trainer.max_steps=2", "trainer.device=cpu",
                                  "algo.reward=tests.box2_fakes:distinct_chars_parity", "algo.is_correction=token")
            if not o.startswith("optim.batch_size")] + [f"optim.batch_size={G * P // 2}"]
    dh.run(dh.command("grpo", over, accelerate_config="cpu_ddp.yaml"), timeout=400)
    lines = dh.step_rows(run)
    assert [l["adapter_version"] for l in lines] == ["s0", "s1"]
    assert loads == [_served_name(l) for l in lines]
    calls = _sampling(server)
    assert sorted(c["model"] for c in calls) == sorted(_served_name(l) for l in lines for _ in range(2))
    assert all(l["probe_mean_abs_dlogp"] < THRESHOLD and l["is_logp_abs_diff_mean"] < 1e-5 for l in lines)


@pytest.mark.slow
def test_grpo_two_ranks_stale_adapter_stops_both_ranks_with_one_checkpoint(tmp_path, server):
    """Rank 0's probe fails at the step-1 sync; rank 1 (whose own adapter check passes) must stop too, and
    both save the step-1 checkpoint together (a collective save) instead of hanging."""
    import subprocess

    import dist_helpers as dh
    from trainer.runtime.checkpoint import complete_checkpoints

    inner = server._load_lora

    def load(body):
        if body["lora_name"].startswith("policy-s1-"):  # this very load (faults are claimed on a request's arrival)
            server._request.faults.add("stale_adapter_loads")
        return inner(body)

    server._load_lora = load
    run = tmp_path / "ddp"
    over = [o for o in _overrides(run, server.url, "trainer.max_steps=3", "trainer.device=cpu",
                                  "algo.reward=tests.box2_fakes:distinct_chars_parity")
            if not o.startswith("optim.batch_size")] + [f"optim.batch_size={G * P // 2}"]
    cmd = dh.command("grpo", over, accelerate_config="cpu_ddp.yaml")
    r = subprocess.run(cmd, env=dh.env(), cwd=dh.REPO, capture_output=True, text=True, timeout=400)
    assert r.returncode != 0
    assert "StaleWeightsError" in r.stderr and "the adapter sync failed on another rank" in r.stderr
    assert [p.name for p in complete_checkpoints(run / "checkpoints")] == ["step_1"]
    assert [l["step"] for l in dh.step_rows(run)] == [1]
