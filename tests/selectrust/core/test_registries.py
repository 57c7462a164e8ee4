"""The one registry style (selectrust/core/plugins.py::Registry): its hooks, and for each kind of named component the
entry-point group through which another package adds one (the one discovery function monkeypatched), and how each
kind reports an entry point that fails to import."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

import selectrust.core.plugins as plugins
from selectrust.core.io import DataError
from selectrust.core.plugins import Registry
from trainer.config import ConfigError


def toy_reward(completion: str, row: dict) -> float:
    """A reward of the tests' own package: 1.0 for a completion that says 'yes'."""
    return 1.0 if "yes" in completion else 0.0


NOT_CALLABLE = 42


class FailingFamily:
    """A family class whose constructor fails (reported as a failed load, as before)."""

    def __init__(self):
        raise RuntimeError("no settings file")


@pytest.fixture()
def install(monkeypatch):
    """``install(registry, name, value)``: ``registry`` reads its group afresh and finds one entry point
    ``name = value`` there (and none in any other group)."""
    def add(registry: Registry, name: str, value: str) -> None:
        ep = EntryPoint(name, value, registry.group)
        monkeypatch.setattr(registry, "installed", None)
        monkeypatch.setattr(registry, "loaded", {})
        monkeypatch.setattr(plugins, "entry_points", lambda group: [ep] if group == registry.group else [])
    return add


def _toy_registry(**hooks) -> Registry:
    return Registry("gadget", "tests.gadgets", {"one": f"{__name__}:toy_reward"},
                    accept=lambda name, obj: obj, error=KeyError, **hooks)


def test_the_registry_looks_up_built_in_registered_then_installed_names(install):
    reg = _toy_registry()
    install(reg, "two", f"{__name__}:toy_reward")
    assert "one" in reg and reg.installed is None  # a built-in name does not read the group
    reg.register("three", print)
    assert reg.names() == ["one", "three", "two"] and reg.installed is not None
    assert reg.get("one") is toy_reward and reg["two"] is toy_reward and reg["three"] is print
    assert reg.source("one") == reg.source("two") == f"{__name__}:toy_reward" and reg.source("three") is None
    with pytest.raises(ValueError, match="gadget 'one' is already registered"):
        reg.register("one", print)
    with pytest.raises(KeyError, match=r"unknown gadget 'four'; known: one \| three \| two"):
        reg.get("four")


def test_the_kinds_own_unknown_and_broken_errors(install):
    reg = _toy_registry(unknown=lambda name, known: LookupError(f"{name} not in {known}"),
                        broken=lambda name, value, e: RuntimeError(f"{name} from {value}: {type(e).__name__}"))
    install(reg, "bad", "no_such_module_xyz:f")
    with pytest.raises(LookupError, match=r"four not in \['one', 'bad'\]"):
        reg.get("four")
    with pytest.raises(RuntimeError, match="bad from no_such_module_xyz:f: ModuleNotFoundError"):
        reg.get("bad")
    plain = _toy_registry()  # without ``broken`` the import's own error propagates (the backends' behaviour)
    install(plain, "bad", "no_such_module_xyz:f")
    with pytest.raises(ModuleNotFoundError):
        plain.get("bad")


# ---- each kind's entry-point group -----------------------------------------------------------------------
def test_a_dpo_loss_from_an_entry_point(install):
    from trainer.algos import dpo
    from trainer.dpo.losses import DPO_LOSSES, ENTRY_POINT_GROUP, dpo_loss

    assert ENTRY_POINT_GROUP == "selectrust.dpo_losses"
    install(DPO_LOSSES, "simpo2", "trainer.algos.dpo:SIMPO")
    assert list(DPO_LOSSES) == ["sigmoid", "simpo", "simpo2"] and dpo_loss("simpo2") is dpo.SIMPO
    install(DPO_LOSSES, "fn", "trainer.algos.dpo:simpo_loss")  # the function, not its DPOLoss
    with pytest.raises(ValueError, match="DPO loss 'fn': 'trainer.algos.dpo:simpo_loss' is not a DPOLoss"):
        dpo_loss("fn")
    install(DPO_LOSSES, "gone", "no_such_module_xyz:IPO")
    with pytest.raises(ValueError, match=r"DPO loss 'gone': entry point 'no_such_module_xyz:IPO' \(group "
                                         r"selectrust.dpo_losses\) failed to load: ModuleNotFoundError"):
        dpo_loss("gone")


def test_an_environment_from_an_entry_point(install):
    from trainer.rl.envs import ENTRY_POINT_GROUP, ENVIRONMENTS, ToyLookupEnv, resolve_env

    assert ENTRY_POINT_GROUP == "selectrust.environments"
    install(ENVIRONMENTS, "lookup2", "trainer.rl.envs:ToyLookupEnv")
    assert list(ENVIRONMENTS) == ["toy_lookup", "webshop", "lookup2"]
    assert isinstance(resolve_env("lookup2", max_turns=2)(), ToyLookupEnv)
    install(ENVIRONMENTS, "gone", "no_such_module_xyz:Env")
    with pytest.raises(ConfigError, match=r"algo.env='gone': entry point 'no_such_module_xyz:Env' \(group "
                                          r"selectrust.environments\) failed to load: ModuleNotFoundError"):
        resolve_env("gone")
    install(ENVIRONMENTS, "number", f"{__name__}:NOT_CALLABLE")
    with pytest.raises(ConfigError, match=f"algo.env='number': '{__name__}:NOT_CALLABLE' is not callable"):
        resolve_env("number")
    with pytest.raises(ConfigError, match="algo.env='nope' is not a known environment"):
        resolve_env("nope")


def test_a_reward_from_an_entry_point(install):
    from trainer.rl.rewards import ENTRY_POINT_GROUP, REGISTRY, resolve_reward

    assert ENTRY_POINT_GROUP == "selectrust.rewards"
    install(REGISTRY, "says_yes", f"{__name__}:toy_reward")
    assert list(REGISTRY)[-1] == "says_yes" and resolve_reward("says_yes") is toy_reward
    install(REGISTRY, "gone", "no_such_module_xyz:f")
    with pytest.raises(ConfigError, match=r"algo.reward='gone': entry point 'no_such_module_xyz:f' \(group "
                                          r"selectrust.rewards\) failed to load: ModuleNotFoundError"):
        resolve_reward("gone")
    with pytest.raises(ConfigError, match="algo.reward='nope' is not a registered reward"):
        resolve_reward("nope")


def test_a_broken_family_entry_point_is_a_data_error_on_field_family(install):
    from eval_hooks.families import FAMILIES, get_family

    install(FAMILIES, "gone", "no_such_module_xyz:Fam")
    with pytest.raises(DataError, match=r"field 'family': cannot load family 'gone' from 'no_such_module_xyz:Fam' "
                                        r"\(ModuleNotFoundError"):
        get_family("gone")
    install(FAMILIES, "failing", f"{__name__}:FailingFamily")
    with pytest.raises(DataError, match=f"cannot load family 'failing' from '{__name__}:FailingFamily' "
                                        r"\(RuntimeError: no settings file\)"):
        get_family("failing")
    install(FAMILIES, "number", f"{__name__}:NOT_CALLABLE")
    with pytest.raises(DataError, match=f"'{__name__}:NOT_CALLABLE' is not a Family named 'number'"):
        get_family("number")
