"""A stage's provenance (issue 44): the precision it actually computed in, torch's threads, the git commit of the
checkout (``-dirty`` when a tracked file differs; None outside a checkout) and the package versions; what makes two
of them differ (a dirty tree matches no other run)."""

from __future__ import annotations

import subprocess

import pytest
from omegaconf import OmegaConf

from trainer.runtime import provenance as prov


def _git(root, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root), *args], check=True,
                   capture_output=True)


def test_git_commit_is_the_checkout_s_head_dirty_only_for_tracked_changes_and_none_outside_one(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    assert prov.git_commit(repo) is None  # not a git checkout
    _git(repo, "init", "-q")
    (repo / "a.py").write_text("x = 1\n")
    _git(repo, "add", "a.py")
    _git(repo, "commit", "-q", "-m", "one")
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert prov.git_commit(repo) == head and len(head) == 40
    (repo / ".venv").mkdir()
    (repo / ".venv" / "lib.py").write_text("")  # untracked: a virtual environment inside the checkout
    assert prov.git_commit(repo) == head
    (repo / "a.py").write_text("x = 2\n")
    assert prov.git_commit(repo) == head + "-dirty"
    (repo / "sub").mkdir()
    assert prov.git_commit(repo / "sub") is None  # inside a checkout but not its top: not this code's checkout


def test_package_versions_name_every_package_and_python():
    versions = prov.package_versions()
    assert set(versions) == {*prov.PACKAGES, "python"} and versions["torch"] and versions["python"].count(".") == 2


def test_stage_precision_is_what_the_stage_s_settings_resolve_to_here():
    from selectrust.model.precision import resolve_mixed_precision

    auto = "fp32" if resolve_mixed_precision("auto", quiet=True) == "no" else "bf16"
    assert prov.run_provenance()["precision"] == auto
    assert prov.stage_precision(OmegaConf.create({"trainer": {"mixed_precision": "no"}})) == "fp32"
    assert prov.stage_precision(OmegaConf.create({"generation": {"mixed_precision": "auto"}})) == auto
    both = OmegaConf.create({"trainer": {"mixed_precision": "bf16"}, "generation": {"mixed_precision": "no"}})
    assert prov.stage_precision(both) == "trainer.mixed_precision=bf16,generation.mixed_precision=fp32"
    assert prov.stage_precision(OmegaConf.create({"out_dir": "x"})) is None
    stage = prov.stage_provenance(OmegaConf.create({"trainer": {"mixed_precision": "bf16"}}), prov.run_provenance())
    assert stage["precision"] == "bf16" and set(stage) == set(prov.RECORDED)


CPUINFO = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile
processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile
"""


def test_cpu_info_names_the_model_and_the_instruction_sets_that_change_the_numbers():
    assert prov.cpu_info(CPUINFO) == {"model": "Intel(R) Xeon(R) Platinum 8480+",
                                      "flags": ["amx_bf16", "avx512_bf16", "avx512f", "avx2"]}
    epyc = "model name\t: AMD EPYC 7B12\nflags\t: fpu avx avx2 fma\n"
    assert prov.cpu_info(epyc) == {"model": "AMD EPYC 7B12", "flags": ["avx2"]}
    assert prov.cpu_info("")["flags"] == []
    assert set(prov.run_provenance()["cpu"]) == {"model", "flags"}


def test_what_a_run_ran_in_is_its_stages_precisions_not_auto_s():
    assert prov.ran_in({"eval_base": "fp32", "mine": "fp32", "scope": None}) == "fp32"
    assert prov.ran_in({"eval_base": "fp32", "scope": "bf16"}) == "mixed"
    assert prov.ran_in({"eval_base": None}) is None
    made = {"eval_base": {"precision": "fp32"}, "scope": None}
    assert prov.stage_precisions(made) == {"eval_base": "fp32", "scope": None}
    run = {**BASE, "cpu": {"model": "x", "flags": ["avx2"]}}
    assert prov.differing_fields({**run, "precision": "bf16"}, run, skip=("precision",)) == {}
    assert prov.differing_fields(dict(BASE), run) == {"cpu": None}  # a stage recorded without its CPU: unknown


BASE = {"precision": "fp32", "threads": 2, "git_commit": "a" * 40, "versions": {"torch": "2.4.0", "python": "3.11.9"}}


@pytest.mark.parametrize("change, said", [
    ({"precision": "bf16"}, "precision: recorded fp32 != now bf16"),
    ({"threads": 1}, "threads: recorded 2 != now 1"),
    ({"git_commit": "b" * 40}, f"git_commit: recorded {'a' * 40} != now {'b' * 40}"),
    ({"versions": {"torch": "2.5.0", "python": "3.11.9"}}, "versions.torch: recorded 2.4.0 != now 2.5.0"),
    ({"git_commit": "a" * 40 + "-dirty"}, "git_commit: recorded"),
])
def test_each_field_that_differs_is_named(change, said):
    diffs = prov.provenance_differences(BASE, {**BASE, **change})
    assert len(diffs) == 1 and diffs[0].startswith(said)
    assert prov.provenance_differences(BASE, dict(BASE)) == []


def test_a_dirty_tree_matches_no_other_run_not_even_the_same_dirty_commit_and_no_record_matches_nothing():
    dirty = {**BASE, "git_commit": "a" * 40 + "-dirty"}
    diffs = prov.provenance_differences(dirty, dict(dirty))
    assert len(diffs) == 1 and "uncommitted changes matches no other run" in diffs[0]
    assert prov.provenance_differences(None, BASE) == ["provenance not recorded (a stage of an earlier version)"]
    assert prov.differing_fields({**BASE, "threads": 1}, BASE) == {"threads": 1}
