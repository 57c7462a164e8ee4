"""Named data sources (selectrust/core/data_sources.py): registration, discovery through the entry-point group,
paths that pass through unchanged, the error for an unknown source, and the demo's declaration."""

import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import selectrust.core.plugins as plugins
import selectrust.core.data_sources as ds
from selectrust.core.io import DataError
from recipe_utils import ROOT


@pytest.fixture()
def empty_registry(monkeypatch):
    """No source registered, and the entry points as ``eps`` (monkeypatched ``selectrust.core.plugins.entry_points``)."""
    eps: list[EntryPoint] = []
    monkeypatch.setattr(ds.DATA_SOURCES, "registered", {})
    monkeypatch.setattr(ds.DATA_SOURCES, "loaded", {})
    monkeypatch.setattr(ds.DATA_SOURCES, "installed", None)
    monkeypatch.setattr(ds.DATA_SOURCES, "failed", {})
    monkeypatch.setattr(plugins, "entry_points", lambda group: [e for e in eps if e.group == group])
    return eps


def test_a_registered_source_resolves_its_paths(empty_registry, tmp_path):
    seen = []

    def resolver(rest):
        seen.append(rest)
        return str(tmp_path / rest.replace("/", "_"))

    ds.register_data_source("mysrc", resolver)
    ds.register_data_source("mysrc", resolver)  # the same resolver again: a no-op
    assert ds.resolve_data_path("mysrc:3/a.jsonl") == str(tmp_path / "3_a.jsonl")
    assert seen == ["3/a.jsonl"] and ds.known_data_sources() == ["mysrc"]
    with pytest.raises(ValueError, match="already registered"):
        ds.register_data_source("mysrc", lambda rest: rest)


@pytest.mark.parametrize("scheme", ["hf", "C", "1x", "a/b", ""])
def test_reserved_or_malformed_schemes_are_refused(empty_registry, scheme):
    with pytest.raises(ValueError, match="data source scheme"):
        ds.register_data_source(scheme, lambda rest: rest)


def test_other_paths_pass_through_unchanged(empty_registry, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "dataset_dict.json").write_text("{}")
    (tmp_path / "odd:name.jsonl").write_text("{}\n")
    for path in ("data/pairs.jsonl", str(tmp_path / "x.jsonl"), "hf:openai/gsm8k:main:test", "C:\\data\\x.jsonl",
                 "s3://bucket/x.jsonl", "saved:test", "odd:name.jsonl"):
        assert ds.resolve_data_path(path) == path


def test_an_unknown_source_is_an_error_listing_the_known_ones(empty_registry):
    ds.register_data_source("mysrc", lambda rest: rest)
    with pytest.raises(DataError, match=r"'nosuch:0/a.jsonl'.*names data source 'nosuch'.*known: \['mysrc'\]"
                                        r".*selectrust.data_sources"):
        ds.resolve_data_path("nosuch:0/a.jsonl")


def test_entry_points_are_discovered_lazily_and_loaded_when_used(empty_registry, monkeypatch, tmp_path):
    monkeypatch.setenv("SELECTRUST_CACHE", str(tmp_path))
    empty_registry.append(EntryPoint(name="toy", value="demos.toy.task:resolve_source", group=ds.ENTRY_POINT_GROUP))
    empty_registry.append(EntryPoint(name="broken", value="no_such_module_xyz:f", group=ds.ENTRY_POINT_GROUP))
    empty_registry.append(EntryPoint(name="other", value="demos.toy.task:resolve_source", group="another.group"))
    assert ds.known_data_sources() == ["broken", "toy"]
    assert ds.DATA_SOURCES.loaded == {}  # listed, not loaded
    path = ds.resolve_data_path("toy:1/mist_heldout.jsonl")
    from demos.toy import task

    assert ds.DATA_SOURCES.loaded == {"toy": task.resolve_source}
    assert Path(path) == task.cache_dir(1) / "mist_heldout.jsonl" and Path(path).is_file()
    with pytest.raises(DataError, match=r"data source plugin 'broken' cannot be used: importing no_such_module_xyz:f "
                                        r"failed: ModuleNotFoundError"):
        ds.resolve_data_path("broken:x")


def test_pyproject_declares_the_demo_source_and_packages_it():
    import tomllib

    from demos.toy import task

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    declared = project["project"]["entry-points"][ds.ENTRY_POINT_GROUP]
    assert declared == {task.SCHEME: "demos.toy.task:resolve_source"}
    ep = EntryPoint(name=task.SCHEME, value=declared[task.SCHEME], group=ds.ENTRY_POINT_GROUP)
    assert ep.load() is task.resolve_source
    assert "demos*" in project["tool"]["setuptools"]["packages"]["find"]["include"]


def test_the_installed_package_declares_the_toy_source():
    """The metadata of the installed package (``pip install -e .``) carries the entry point, so configs'
    ``toy:<seed>/<file>`` paths resolve in every recipe without the trainer knowing the demo."""
    from importlib.metadata import entry_points

    names = {ep.name: ep.value for ep in entry_points(group=ds.ENTRY_POINT_GROUP)}
    assert names.get("toy") == "demos.toy.task:resolve_source", (
        f"entry points of {ds.ENTRY_POINT_GROUP}: {names}; reinstall the package (pip install --no-deps -e .) "
        f"so its metadata matches pyproject.toml ({sys.executable})")
