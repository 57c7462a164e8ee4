"""The one registry style (selectrust/core/plugins.py::Registry): its hooks, and for each kind of named component the
entry-point group through which another package adds one (the one discovery function monkeypatched), and the one
error every kind raises for an entry point that fails to import or names the wrong object (every kind x every way
a plugin breaks: test_plugin_errors.py)."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

import selectrust.core.plugins as plugins
from selectrust.core.errors import PluginError
from selectrust.core.io import DataError
from selectrust.core.plugins import Registry
from selectrust.core.errors import ConfigError


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
        monkeypatch.setattr(registry, "failed", {})
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


def test_the_kinds_own_unknown_error_and_the_one_plugin_error(install):
    reg = _toy_registry(unknown=lambda name, known: LookupError(f"{name} not in {known}"))
    install(reg, "bad", "no_such_module_xyz:f")
    with pytest.raises(LookupError, match=r"four not in \['one', 'bad'\]"):
        reg.get("four")
    with pytest.raises(PluginError, match=r"gadget plugin 'bad' cannot be used: importing no_such_module_xyz:f failed: "
                                          r"ModuleNotFoundError.*group tests.gadgets"):
        reg.get("bad")
    with pytest.raises(LookupError, match=r"four not in \['one'\]"):  # found broken: no longer listed
        reg.get("four")


# ---- each kind's entry-point group -----------------------------------------------------------------------
def test_a_dpo_loss_from_an_entry_point(install):
    from trainer.algos import dpo
    from trainer.dpo.losses import DPO_LOSSES, ENTRY_POINT_GROUP, dpo_loss

    assert ENTRY_POINT_GROUP == "selectrust.dpo_losses"
    install(DPO_LOSSES, "simpo2", "trainer.algos.dpo:SIMPO")
    assert list(DPO_LOSSES) == ["sigmoid", "simpo", "simpo2"] and dpo_loss("simpo2") is dpo.SIMPO
    install(DPO_LOSSES, "fn", "trainer.algos.dpo:simpo_loss")  # the function, not its DPOLoss
    with pytest.raises(PluginError, match="DPO loss plugin 'fn'.*'trainer.algos.dpo:simpo_loss' is not a DPOLoss"):
        dpo_loss("fn")
    install(DPO_LOSSES, "gone", "no_such_module_xyz:IPO")
    with pytest.raises(PluginError, match=r"DPO loss plugin 'gone' cannot be used: importing no_such_module_xyz:IPO "
                                          r"failed: ModuleNotFoundError.* in group selectrust.dpo_losses"):
        dpo_loss("gone")


def test_an_environment_from_an_entry_point(install):
    from trainer.rl.envs import ENTRY_POINT_GROUP, ENVIRONMENTS, ToyLookupEnv, resolve_env

    assert ENTRY_POINT_GROUP == "selectrust.environments"
    install(ENVIRONMENTS, "lookup2", "trainer.rl.envs:ToyLookupEnv")
    assert list(ENVIRONMENTS) == ["toy_lookup", "webshop", "lookup2"]
    assert isinstance(resolve_env("lookup2", max_turns=2)(), ToyLookupEnv)
    install(ENVIRONMENTS, "gone", "no_such_module_xyz:Env")
    with pytest.raises(PluginError, match=r"environment plugin 'gone' cannot be used: importing no_such_module_xyz:Env"
                                          r" failed: ModuleNotFoundError.* in group selectrust.environments"):
        resolve_env("gone")
    install(ENVIRONMENTS, "number", f"{__name__}:NOT_CALLABLE")
    with pytest.raises(PluginError, match=f"algo.env='number': '{__name__}:NOT_CALLABLE' is not callable"):
        resolve_env("number")
    with pytest.raises(ConfigError, match="algo.env='nope' is not a known environment"):
        resolve_env("nope")


def test_a_reward_from_an_entry_point(install):
    from trainer.rl.rewards import ENTRY_POINT_GROUP, REGISTRY, resolve_reward

    assert ENTRY_POINT_GROUP == "selectrust.rewards"
    install(REGISTRY, "says_yes", f"{__name__}:toy_reward")
    assert list(REGISTRY)[-1] == "says_yes" and resolve_reward("says_yes") is toy_reward
    install(REGISTRY, "gone", "no_such_module_xyz:f")
    with pytest.raises(PluginError, match=r"reward plugin 'gone' cannot be used: importing no_such_module_xyz:f "
                                          r"failed: ModuleNotFoundError.* in group selectrust.rewards"):
        resolve_reward("gone")
    with pytest.raises(ConfigError, match="algo.reward='nope' is not a registered reward"):
        resolve_reward("nope")


def test_a_broken_family_entry_point_is_a_plugin_error(install):
    from eval_hooks.families import FAMILIES, get_family

    install(FAMILIES, "gone", "no_such_module_xyz:Fam")
    with pytest.raises(PluginError, match=r"family plugin 'gone' cannot be used: importing no_such_module_xyz:Fam "
                                          r"failed: ModuleNotFoundError"):
        get_family("gone")
    install(FAMILIES, "failing", f"{__name__}:FailingFamily")
    with pytest.raises(DataError, match=f"family plugin 'failing' cannot be used: {__name__}:FailingFamily is not a "
                                        r"valid family: RuntimeError: no settings file"):
        get_family("failing")
    install(FAMILIES, "number", f"{__name__}:NOT_CALLABLE")
    with pytest.raises(PluginError, match=f"'{__name__}:NOT_CALLABLE' is not a Family named 'number'"):
        get_family("number")
