"""The generation-backend registry: a minimal fourth backend, defined here, added through the registry (in code
and as an installed package's entry point) and taken through the trainers' evaluation, the config checks and Taste
fork mining by asking its capabilities; the typed ``generation`` group of each backend; no backend chosen by name
outside the registry. This is the worked example of docs/architecture.md, "A new generation backend"."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields
from importlib.metadata import EntryPoint
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

import selectrust.generation.backends as registry
from eval_hooks import load_rows
from selectrust.core.errors import PluginError
from selectrust.generation.backends.base import GenerationBackend, GenerationResult, Sample
from selectrust.generation.backends import (BACKENDS, BackendSpec, Capabilities, UnknownBackendError, backend_names,
                                          capabilities, get_backend, register_backend, setting, unregister_backend)
from recipe_utils import ROOT, compose
from selectrust.core.errors import ConfigError
from trainer.config import EvalConfig, ModelConfig, generation_schema, validate_common, validate_grpo

MIST = ROOT / "tests" / "data" / "eval" / "mist_small.jsonl"


# ---- the worked example: one module's worth of backend ------------------------------------------------
@dataclass
class CannedSettings:
    """The keys of ``generation=canned``."""

    answer: str = setting("ANSWER: 4", "The reply to every request.")

    def check(self, group: str) -> None:
        if not self.answer:
            raise ValueError(f"{group}.answer is empty")


class CannedBackend(GenerationBackend):
    """Answers every request with the same text (a stand-in for a model that is not the run's)."""

    name = "canned"

    def __init__(self, answer: str):
        self.answer = answer

    def generate(self, requests, *, progress=False, desc="generate"):
        return [GenerationResult(r, [Sample(self.answer, [], [], "stop") for _ in range(r.n)]) for r in requests]

    def score_labels(self, prompts, labels):  # pragma: no cover - no label_scores capability
        raise NotImplementedError


def build_canned(settings: CannedSettings, ctx) -> CannedBackend:
    return CannedBackend(settings.answer)


CANNED = BackendSpec(name="canned", settings=CannedSettings, factory=build_canned, summary="one reply to everything",
                     capabilities=Capabilities(policy_model=False, standalone=True))


@pytest.fixture
def canned():
    spec = register_backend(CANNED)
    yield spec
    unregister_backend("canned")


def test_a_fourth_backend_runs_the_trainers_evaluation(canned, tmp_path):
    from trainer.eval_bridge import build_inference_backend, run_eval

    assert "canned" in BACKENDS and backend_names()[:3] == ["hf", "vllm_server", "openai_chat"]
    gen = OmegaConf.structured(generation_schema("canned")(answer="ANSWER: 42"))
    assert gen.backend == "canned" and list(gen) == ["backend", "answer"]
    # a backend with a model of its own: nothing of model.path is loaded
    backend = build_inference_backend(OmegaConf.structured(ModelConfig(path="/no/such/model")), gen)
    assert isinstance(backend, CannedBackend) and backend.answer == "ANSWER: 42"
    rows = load_rows("mist", MIST)
    m = run_eval(backend, rows, OmegaConf.structured(EvalConfig(path=str(MIST), family="mist")), tmp_path / "o",
                 progress=False)
    scores = [json.loads(line) for line in (tmp_path / "o" / "item_scores.jsonl").read_text().splitlines()]
    assert m["eval_settings"]["backend"] == "canned" and len(scores) == len(rows)
    assert {s["response"] for s in scores} == {"ANSWER: 42"}


def test_the_config_checks_ask_the_fourth_backends_capabilities(canned):
    cfg = compose("grpo", [])
    cfg.generation = OmegaConf.structured(generation_schema("canned"))
    with pytest.raises(ConfigError, match=r"generation=canned cannot run GRPO rollouts.*use generation=hf or "
                                          r"generation=vllm_server"):
        validate_grpo(cfg)
    ev = compose("evaluate", [f"eval.path={MIST}"])
    ev.generation = OmegaConf.structured(generation_schema("canned")(answer=""))
    with pytest.raises(ConfigError, match=r"^generation\.answer is empty$"):  # the backend's own check
        validate_common(ev)
    ev.generation.answer, ev.adapter_path = "ANSWER: 1", "runs/x/final"
    with pytest.raises(ConfigError, match="generation=canned evaluates a model of its own.*adapter_path"):
        validate_common(ev)


def test_taste_mining_builds_any_standalone_backend_and_never_falls_back(canned):
    from eval_hooks.builders.taste_mining_run import MineForksConfig, ModelSpec, build_backend, check_config

    assert isinstance(build_backend(ModelSpec(backend="canned", model="m")), CannedBackend)
    with pytest.raises(UnknownBackendError, match=r"unknown generation backend 'nope'; known: hf \| vllm_server"):
        build_backend(ModelSpec(backend="nope", model="tiny"))  # never a silent in-process tiny model
    judges = [ModelSpec(name="a", backend="canned", model="j"), ModelSpec(name="b", backend="vllm_server", model="k")]
    cfg = MineForksConfig(trajectories=["t.jsonl"], out_dir="o", generator=ModelSpec(model="g"), judges=judges)
    with pytest.raises(ValueError, match=r"judges\[1\]\.backend='vllm_server'; accepted hf \| openai_chat \| canned"):
        check_config(cfg)  # vllm_server needs the run's tokenizer: not standalone


def test_a_backend_from_an_installed_packages_entry_point(monkeypatch):
    import selectrust.core.plugins as plugins

    ep = EntryPoint("canned", f"{__name__}:CANNED", registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(BACKENDS, "installed", None)
    monkeypatch.setattr(BACKENDS, "loaded", {})
    monkeypatch.setattr(plugins, "entry_points", lambda group: [ep] if group == registry.ENTRY_POINT_GROUP else [])
    assert backend_names() == ["hf", "vllm_server", "openai_chat", "canned"] and get_backend("canned") is CANNED
    assert capabilities("canned") == Capabilities(policy_model=False, standalone=True)
    bad = EntryPoint("broken", "selectrust.generation.backends.hf:HFSettings", registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(BACKENDS, "installed", None)
    monkeypatch.setattr(BACKENDS, "failed", {})
    monkeypatch.setattr(plugins, "entry_points", lambda group: [bad])
    with pytest.raises(PluginError, match="generation backend plugin 'broken' cannot be used: .*not a BackendSpec "
                                          "named 'broken'"):
        get_backend("broken")


# ---- the built-in backends ------------------------------------------------------------------------------
def test_the_backend_choice_and_the_conf_files_come_from_the_registry():
    from trainer.config import Backend

    assert list(Backend.__members__) == list(registry.BUILTIN)
    assert sorted(registry.BUILTIN) == sorted(p.stem for p in (ROOT / "conf" / "generation").glob("*.yaml"))
    for name in registry.BUILTIN:
        cfg = compose("evaluate", [f"generation={name}"])
        assert OmegaConf.get_type(cfg.generation) is generation_schema(name) and cfg.generation.backend == name
        spec = get_backend(name)
        assert list(cfg.generation) == ["backend"] + [f.name for f in fields(spec.settings)]
        assert all(f.metadata.get("help") for f in fields(spec.settings)), name


@pytest.mark.parametrize("override, match", [
    (["generation=vllm_server", "generation.batch_size=8"], "Key 'batch_size' not in 'VllmServerGenerationConfig'"),
    (["generation=hf", "generation.url=http://h:1"], "Key 'url' not in 'HfGenerationConfig'"),
    (["generation=vllm_server", "generation.server_kind=tgi"], "Invalid value 'tgi', expected one of"),
    (["generation=openai_chat", "generation.modle=m"], "Key 'modle' not in 'OpenaiChatGenerationConfig'"),
])
def test_each_backend_group_has_its_backends_keys_only(override, match):
    with pytest.raises(Exception) as err:
        compose("evaluate", override)
    assert re.search(match, f"{err.value} {err.value.__cause__}")


def test_a_backend_override_without_its_group_is_refused_before_anything_runs():
    cfg = compose("evaluate", [f"eval.path={MIST}", "generation.backend=vllm_server"])
    with pytest.raises(ConfigError, match=r"generation\.backend=vllm_server but the generation group holds the keys "
                                          r"of another backend \(HfGenerationConfig\).*generation=vllm_server"):
        validate_common(cfg)


def test_llama_cpp_is_a_declared_flavour_of_vllm_server_with_its_own_capabilities(tmp_path):
    from selectrust.generation.backends.vllm_server import FLAVOURS, VLLMServerSettings
    from trainer.eval_bridge import make_epoch_eval

    assert capabilities("vllm_server", VLLMServerSettings(server_kind="auto")) == FLAVOURS["vllm"]
    text = capabilities("vllm_server", VLLMServerSettings(server_kind="llama_cpp"))
    assert text.policy_model and not (text.sampled_token_ids or text.prompt_logprobs or text.weight_sync)
    validate_grpo(compose("grpo", ["generation=vllm_server", "generation.url=http://h:1"]))  # vLLM (or auto): fine
    cfg = compose("grpo", ["generation=vllm_server", "generation.server_kind=llama_cpp"])
    with pytest.raises(ConfigError, match="generation=vllm_server cannot run GRPO rollouts: they need the sampled"):
        validate_grpo(cfg)
    with pytest.raises(ConfigError, match="generation=vllm_server cannot take the trained adapter.*generation=hf"):
        make_epoch_eval(SimpleNamespace(cfg=cfg, run_dir=str(tmp_path)), [{"row_id": "r"}], lambda: None)


def test_server_errors_come_from_the_backends_capabilities():
    from selectrust.generation.backends.transport import ServerError
    from trainer.eval_bridge import server_errors
    from trainer.eval_bridge.weight_sync import StaleWeightsError

    assert server_errors(compose("sft", []).generation) == ()
    assert server_errors(compose("sft", ["generation=vllm_server"]).generation) == (ServerError, StaleWeightsError)
    assert server_errors(compose("sft", ["generation=openai_chat"]).generation) == (ServerError,)


def test_help_lists_the_chosen_backends_keys():
    from trainer.config.cli_help import render_help

    out = render_help("evaluate", ["generation=openai_chat"])
    assert "  generation.api_key_env = null\n" in out and "  generation.split_n = False\n" in out
    assert "generation.batch_size" not in out and "generation.sync_every" not in out
    assert "  generation.server_kind = auto  [auto | vllm | llama_cpp | openai]" in render_help(
        "evaluate", ["generation=vllm_server"])


def test_a_run_saved_with_every_backends_keys_resumes_under_its_backends_schema():
    """Before each backend had its own schema, config.yaml held every backend's keys under ``generation``."""
    from trainer.runtime.run_dir import config_differences

    now = OmegaConf.to_container(compose("sft", []), resolve=True)
    saved = json.loads(json.dumps(now))
    saved["generation"].update(url="http://127.0.0.1:8000", model=None, sync_every=1, server_kind="auto")
    assert config_differences(saved, now) == []
    saved["generation"]["backend"] = "vllm_server"
    assert config_differences(saved, now) == ["generation.backend: saved 'vllm_server' != now 'hf'"]


# ---- nothing outside the registry knows a backend by name ----------------------------------------------------
NAMES = "|".join(registry.BUILTIN)
BY_NAME = re.compile(rf"""(==|!=|\bin\b)\s*\(?["']({NAMES})["']|["']({NAMES})["']\s*(==|!=|\bin\b|,\s*["']({NAMES})["'])""")


def test_no_backend_is_chosen_by_name_outside_the_registry():
    assert BY_NAME.search('if gen_cfg.backend == "hf":') and BY_NAME.search("if cfg.generation.backend != 'vllm_server'")
    assert BY_NAME.search('BACKENDS = ("openai_chat", "hf")') and not BY_NAME.search('name = "hf"')
    own = ROOT / "selectrust" / "generation" / "backends"  # the registry and the backends' own modules
    files = [p for d in ("trainer", "recipes", "eval_hooks", "launch", "bench", "demos")
             for p in sorted((ROOT / d).rglob("*.py")) if own not in p.parents]
    bad = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in files
           for n, line in enumerate(p.read_text().splitlines(), 1) if BY_NAME.search(line)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("kind", ["openai", "llama_cpp"])
def test_grpo_on_a_text_only_server_kind_names_the_server_kind_fix_at_config_check(kind):
    """Issue 42 #7: the refusal names generation.server_kind=vllm (not only other backends), as a ConfigError of
    the config checks, before any model loads."""
    cfg = compose("grpo", ["generation=vllm_server", f"generation.server_kind={kind}"])
    with pytest.raises(ConfigError, match=r"cannot run GRPO rollouts.*use generation\.server_kind=vllm or generation=hf"):
        validate_grpo(cfg)


def test_a_plugin_naming_a_missing_module_breaks_only_the_command_that_chooses_it(monkeypatch):
    """Issue 42 #6: the schema (--help, generation=hf) skips a backend plugin that cannot be imported; choosing it
    fails in one line naming the plugin and the entry-point group."""
    import selectrust.core.plugins as plugins
    from trainer.config.schemas import _backend_help

    ghost = EntryPoint("ghost", "no_such_module_42:SPEC", registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(BACKENDS, "installed", None)
    monkeypatch.setattr(BACKENDS, "loaded", {})
    monkeypatch.setattr(BACKENDS, "failed", {})
    monkeypatch.setattr(plugins, "entry_points", lambda group: [ghost] if group == registry.ENTRY_POINT_GROUP else [])
    assert "ghost" in backend_names() and "ghost" not in registry.loadable_backend_names()
    assert "hf (" in _backend_help() and "ghost" not in _backend_help()
    assert "hf" in registry.backends_with("in_process")
    from trainer.config.composition import register_schemas

    register_schemas()  # every loadable backend's schema, the broken plugin skipped
    validate_common(compose("sft", ["generation=hf"]))
    with pytest.raises(PluginError) as e:
        get_backend("ghost")
    msg = str(e.value)
    assert "\n" not in msg and "'ghost'" in msg and registry.ENTRY_POINT_GROUP in msg and "no_such_module_42" in msg
