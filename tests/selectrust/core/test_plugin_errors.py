"""One error contract for every plugin (issue 51, Deliver 1): every registry kind x every way an installed package's
entry point can go wrong (its module missing, its import raising, the wrong kind of object, a name another component
already has). A broken plugin is a ``PluginError`` (one line naming the plugin, its group and distribution and the
fix; exit 2 under the contract) only where its name is used; listings leave it out with one warning line; a name
clash keeps the built-in (or the project's own) component, with one warning line. Then the command lines, with the
broken plugins installed as a distribution's metadata on the path (as ``pip install`` leaves them)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from importlib.metadata import distributions
from types import SimpleNamespace

import pytest

import selectrust.core.plugins as plugins
from eval_hooks.cli_contract import INPUT_EXIT, classify
from recipe_utils import ROOT
from registry_kinds import REGISTRIES
from selectrust.core.errors import DataError, PluginError

CASES = ("missing", "raising", "wrong_type")
PLUGIN_MODULE = "fakeplug_objects_51"  # importable: holds a number, which no kind accepts
RAISING_MODULE = "fakeplug_raising_51"  # raises on import


def registry(group: str):
    module, name = REGISTRIES[group]
    return getattr(importlib.import_module(module), name)


def _dist(site, name: str, groups: dict[str, dict[str, str]]) -> None:
    """A distribution's metadata (``<name>-0.1.dist-info``: METADATA and entry_points.txt) in ``site``."""
    info = site / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for group, eps in groups.items()))


def _broken_entries() -> dict[str, str]:
    return {"zz_missing": "no_such_module_xyz_51:THING", "zz_raising": f"{RAISING_MODULE}:THING",
            "zz_wrong_type": f"{PLUGIN_MODULE}:NUMBER"}


@pytest.fixture()
def site(tmp_path, monkeypatch):
    """A site directory on ``sys.path`` holding the plugins' modules, and ``install(dists)``: the entry points of
    those distributions (names, in ``sys.path`` order) are the installed ones, every registry reading them afresh."""
    root = tmp_path / "site"
    root.mkdir()
    (root / f"{PLUGIN_MODULE}.py").write_text("NUMBER = 42\n")
    (root / f"{RAISING_MODULE}.py").write_text("raise RuntimeError('plugin import boom')\n")
    monkeypatch.syspath_prepend(str(root))

    def install(order: list[str]) -> None:
        found = {d.metadata["Name"]: d for d in distributions(path=[str(root)])}
        eps = [ep for name in order for ep in found[name].entry_points]
        monkeypatch.setattr(plugins, "entry_points", lambda group: [ep for ep in eps if ep.group == group])
        for group in REGISTRIES:
            reg = registry(group)
            for attr, fresh in (("installed", None), ("loaded", {}), ("failed", {}), ("warned", set())):
                monkeypatch.setattr(reg, attr, fresh)

    return SimpleNamespace(root=root, install=install)


def test_the_walk_covers_every_registry_the_product_makes():
    for group in REGISTRIES:
        assert registry(group).group == group
    made = {r.group for r in plugins._REGISTRIES if r.group.startswith("selectrust.")}
    assert made == set(REGISTRIES), f"walk these too: {sorted(made - set(REGISTRIES))}"


@pytest.mark.parametrize("group", sorted(REGISTRIES))
def test_a_broken_plugin_fails_in_one_line_only_where_it_is_used(group, site, capsys):
    """Every kind (the demo arms: issue 51 BAD 5, a raw ModuleNotFoundError / RuntimeError; an answer type: WEAK, not
    named): missing, raising and wrong-type plugins are left out of listings with one warning line each, and are one
    ``PluginError`` line naming plugin, group and distribution where chosen."""
    _dist(site.root, "fakeplug", {group: _broken_entries()})
    site.install(["fakeplug"])
    reg = registry(group)
    capsys.readouterr()
    assert {"zz_missing", "zz_raising", "zz_wrong_type"} <= set(reg.names())  # known, nothing imported yet
    listed = list(reg)  # a listing (the config's choices, the schemas, --help): each broken one left out, once
    assert not {"zz_missing", "zz_raising", "zz_wrong_type"} & set(listed) and listed == reg.loadable()
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 3 and all(w.startswith(f"warning: {reg.kind} plugin 'zz_") for w in warnings), warnings
    assert all("left out" in w and "distribution fakeplug" in w and group in w for w in warnings)
    for case, why in (("missing", "importing no_such_module_xyz_51:THING failed: ModuleNotFoundError"),
                      ("raising", f"importing {RAISING_MODULE}:THING failed: RuntimeError: plugin import boom"),
                      ("wrong_type", f"{PLUGIN_MODULE}:NUMBER is not a valid {reg.kind}: ")):
        name = f"zz_{case}"
        with pytest.raises(PluginError) as e:
            reg.get(name)
        msg = str(e.value)
        assert isinstance(e.value, DataError) and "\n" not in msg
        assert msg.startswith(f"{reg.kind} plugin {name!r} cannot be used: {why}"), msg
        assert f"in group {group} of distribution fakeplug" in msg and "pip uninstall fakeplug" in msg
        assert (e.value.name, e.value.group, e.value.distribution) == (name, group, "fakeplug")
        assert classify(e.value) == (INPUT_EXIT, f"error: {msg}")  # one line, exit 2, in every command line
        assert name in reg and name not in reg.names()  # still named when chosen, no longer listed
    assert capsys.readouterr().err == ""  # the warnings are printed once


@pytest.mark.parametrize("group", sorted(g for g in REGISTRIES if registry(g).builtin))
def test_an_entry_point_named_like_a_built_in_is_ignored_with_one_warning(group, site, capsys):
    """Issue 51 WEAK: an entry point named ``mist``, ``hf``, ``sigmoid``, ... was silently ignored."""
    reg = registry(group)
    builtin = next(iter(reg.builtin))
    _dist(site.root, "fakeplug", {group: {builtin: "no_such_module_xyz_51:THING"}})  # would fail if it were loaded
    site.install(["fakeplug"])
    capsys.readouterr()
    assert reg.names().count(builtin) == 1 and builtin in list(reg)
    chosen = reg.get(builtin)
    expected = reg.builtin[builtin]
    assert chosen is (reg.loaded[builtin] if isinstance(expected, str) else expected)
    reg.names()
    err = capsys.readouterr().err.splitlines()
    assert err == [f"warning: {reg.kind} plugin {builtin!r} (entry point `{builtin} = no_such_module_xyz_51:THING` "
                   f"in group {group} of distribution fakeplug) has the name of a built-in {reg.kind}: the built-in "
                   "one is used; rename the entry point to use the plugin"], err


@pytest.mark.parametrize("group", sorted(REGISTRIES))
def test_of_two_distributions_declaring_one_name_the_projects_own_wins(group, site, capsys):
    """Another package's ``toy`` data source (or any kind's name) first on sys.path does not replace the project's
    own: one warning line names both."""
    _dist(site.root, "otherplug", {group: {"dup": f"{PLUGIN_MODULE}:NUMBER"}})
    _dist(site.root, plugins.PROJECT, {group: {"dup": "selectrust.core.plugins:PROJECT"}})
    site.install(["otherplug", plugins.PROJECT])  # the other one first on the path
    capsys.readouterr()
    assert reg_value(group, "dup") == "selectrust.core.plugins:PROJECT"
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"warning: {registry(group).kind} 'dup' is declared by more than one "
                                               f"package: entry point `dup = selectrust.core.plugins:PROJECT` in group "
                                               f"{group} of distribution {plugins.PROJECT} is used, not entry point "
                                               f"`dup = {PLUGIN_MODULE}:NUMBER`"), err


def reg_value(group: str, name: str) -> str:
    return registry(group).discovered()[name].value


def test_a_data_source_that_is_not_callable_is_named_not_a_type_error(site):
    """Issue 51 BAD 4: a TypeError with a traceback through the trainers."""
    from selectrust.core.data_sources import resolve_data_path
    from selectrust.core.io import read_records

    _dist(site.root, "fakeplug", {"selectrust.data_sources": {"missrc": f"{PLUGIN_MODULE}:NUMBER"}})
    site.install(["fakeplug"])
    for read in (resolve_data_path, read_records):  # the trainers' loaders, and every reader of eval_hooks
        with pytest.raises(PluginError, match=r"^data source plugin 'missrc' cannot be used: .*must be callable.*"
                                              r"group selectrust.data_sources of distribution fakeplug"):
            read("missrc:foo")


def test_a_chosen_broken_dpo_loss_is_a_plugin_error(site):
    """Issue 51 BAD 3, in process (the command line: below)."""
    from trainer.dpo.losses import dpo_loss

    _dist(site.root, "fakeplug", {"selectrust.dpo_losses": _broken_entries()})
    site.install(["fakeplug"])
    for name in ("zz_missing", "zz_raising", "zz_wrong_type"):
        with pytest.raises(PluginError, match=f"^DPO loss plugin '{name}' cannot be used"):
            dpo_loss(name)


# ---- the command lines ------------------------------------------------------------------------------------
#: The broken plugins a distribution on the path holds, by the kind a test installs.
INSTALLED = {
    "selectrust.families": _broken_entries(),
    "selectrust.backends": {"zz_wrong_kind": f"{PLUGIN_MODULE}:Thing"},
    "selectrust.dpo_losses": _broken_entries(),
    "selectrust.data_sources": {"missrc": f"{PLUGIN_MODULE}:NUMBER"},
}


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory):
    """``broken_site(*groups)``: the environment of a command line with one distribution on the path that holds the
    broken plugins of ``groups`` (:data:`INSTALLED`)."""
    def env(*groups: str) -> dict:
        root = tmp_path_factory.mktemp("broken_site")
        (root / f"{PLUGIN_MODULE}.py").write_text("NUMBER = 42\n\nclass Thing:\n    pass\n")
        (root / f"{RAISING_MODULE}.py").write_text("raise RuntimeError('plugin import boom')\n")
        _dist(root, "fakeplug", {g: INSTALLED[g] for g in groups})
        return {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ["PYTHONPATH"]])}
    return env


def _run(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


def _only_warnings(stderr: str) -> list[str]:
    """The stderr lines that are not warnings (asserting there is no traceback)."""
    assert "Traceback" not in stderr, stderr[-3000:]
    return [line for line in stderr.splitlines() if not line.startswith("warning: ")]


@pytest.mark.parametrize("script, group", [("evaluate", "selectrust.families"), ("dpo", "selectrust.families"),
                                           ("grpo", "selectrust.families"), ("evaluate", "selectrust.backends"),
                                           ("dpo", "selectrust.dpo_losses")])
def test_help_works_with_broken_plugins_installed_and_lists_none_of_them(script, group, broken_site):
    """Issue 51 BAD 1 and 2: a broken family plugin (missing, raising, not a Family), or a backend plugin naming the
    wrong kind of object, made every recipe's --help exit 1 with a traceback from building the schema."""
    shown = _run([f"recipes/{script}.py", "--help"], broken_site(group))
    assert shown.returncode == 0 and _only_warnings(shown.stderr) == [], shown.stderr[-3000:]
    assert "zz_" not in shown.stdout and "generation.backend = hf  [hf | vllm_server | openai_chat]" in shown.stdout
    left_out = [line for line in shown.stderr.splitlines() if " is left out: " in line]
    assert len(left_out) == len(INSTALLED[group]) and all("distribution fakeplug" in line for line in left_out)


@pytest.mark.parametrize("script, key, name", [("evaluate", "eval.family", "zz_missing"),
                                               ("evaluate", "eval.family", "zz_raising"),
                                               ("evaluate", "eval.family", "zz_wrong_type"),
                                               ("evaluate", "generation.backend", "zz_wrong_kind"),
                                               ("evaluate", "generation", "zz_wrong_kind"),
                                               ("dpo", "algo.loss_type", "zz_missing"),
                                               ("dpo", "algo.loss_type", "zz_raising"),
                                               ("dpo", "algo.loss_type", "zz_wrong_type")])
def test_a_command_choosing_a_broken_plugin_exits_2_in_one_line(script, key, name, broken_site):
    """Issue 51 BAD 1-3: the command that chooses the broken plugin fails, in one line naming it (a chosen broken
    DPO loss was a ValueError traceback, exit 1)."""
    env = broken_site("selectrust.families", "selectrust.backends", "selectrust.dpo_losses")
    ran = _run([f"recipes/{script}.py", "model.path=tiny", "data.train_path=x.jsonl" if script == "dpo" else
                "eval.max_new_tokens=2", f"{key}={name}"], env)
    errors = _only_warnings(ran.stderr)
    assert ran.returncode == 2 and len(errors) == 1, ran.stderr[-3000:]
    assert errors[0].startswith("error: ") and f"plugin {name!r} cannot be used" in errors[0]
    assert "distribution fakeplug" in errors[0] and "pip uninstall fakeplug" in errors[0]


def test_eval_hooks_names_a_broken_data_source_plugin(broken_site, tmp_path):
    """Issue 51 WEAK: ``python -m eval_hooks expand --data missrc:foo`` said "file does not exist"."""
    ran = _run(["-m", "eval_hooks", "expand", "--family", "mist", "--data", "missrc:foo", "--out",
                str(tmp_path / "rows.jsonl")], broken_site("selectrust.data_sources"))
    errors = _only_warnings(ran.stderr)
    assert ran.returncode == 2 and len(errors) == 1, ran.stderr[-3000:]
    assert errors[0].startswith("error: data source plugin 'missrc' cannot be used") and "fakeplug" in errors[0]
