"""What a stage's result depends on beyond its config (issue 44): its provenance.

A stage's numbers depend on more than its composed config: the precision it actually computed in (``auto`` is
resolved per machine: fp32 on a CPU without AMX-BF16, bf16 with it, ``selectrust.model.precision``), torch's
intra-op threads (the order of float sums), the code (the git commit of the checkout) and the libraries. The
stage runner (``recipes/stages/``) records a stage's provenance in its ``stage_complete.json`` and, when
given a provenance function (the demos), reuses a finished stage only while it matches
(:func:`provenance_differences`).

- :func:`run_provenance`: the run's: ``precision`` (what ``auto`` resolves to here; what each stage ran in is its
  own, below), ``threads``, ``git_commit``, ``versions``, ``cpu`` (:func:`cpu_info`: the CPU model and which of the
  instruction sets :data:`CPU_FLAGS` it has);
- :func:`stage_provenance`: one stage's: the run's with the precision its own config resolves to (what it computes
  in) and the threads at its start;
- :func:`git_commit`: ``git rev-parse HEAD`` of the checkout this code runs from, ``-dirty`` when its tracked
  files differ from that commit (untracked files, e.g. a ``.venv`` inside the checkout, do not count); None
  outside a git checkout (an installed wheel) or without git. No network.

A dirty tree matches no other run, not even one recorded under the same ``<commit>-dirty``: its uncommitted
changes may differ.
"""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path
from importlib.metadata import PackageNotFoundError, version
from selectrust.model.precision import resolve_mixed_precision

PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "selectrust")  # and python
FIELDS = ("precision", "threads", "git_commit", "versions")  # what must match for a stage to be reused
#: What a stage records besides (:func:`differing_fields` reports it; reuse does not ask for it, so a run continued on
#: another machine kind reuses its stages, and its summary's ``stage_provenance`` says which ran where).
RECORDED = (*FIELDS, "cpu")
#: The instruction sets recorded (``/proc/cpuinfo`` flags): AMX-BF16 (``auto`` computes in bf16), AVX512-BF16,
#: AVX-512 and AVX2 (which kernels torch's CPU GEMMs use, so the float sums).
CPU_FLAGS = ("amx_bf16", "avx512_bf16", "avx512f", "avx2")
PRECISION_KEYS = ("trainer.mixed_precision", "generation.mixed_precision")  # a stage config's precision settings
DIRTY = "-dirty"
_CHECKOUT = Path(__file__).resolve().parents[2]  # the repository root this module sits in


def git_commit(root: Path | str = _CHECKOUT) -> str | None:
    """The commit ``root`` (the top of a git checkout) is at, with ``-dirty`` when a tracked file differs from it;
    None when ``root`` is not the top of a git checkout or git is missing."""
    root = Path(root).resolve()

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root:  # e.g. installed inside some other repository
        return None
    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return commit + DIRTY if status is None or status else commit


def package_versions() -> dict[str, str | None]:
    """``{package: version}`` of :data:`PACKAGES` (None: not installed) and ``python``."""
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    out["python"] = platform.python_version()
    return out


def precision_name(value: str) -> str:
    """A mixed-precision setting resolved on this machine (``auto`` -> bf16 or fp32), named by what computes:
    ``no`` is fp32."""
    resolved = resolve_mixed_precision(str(value), quiet=True)
    return "fp32" if resolved == "no" else resolved


def _setting(cfg, key: str):
    """The value at the dotted ``key`` of ``cfg`` (typed settings, or a stage's composed config) read by
    attribute; None where a part of it is absent."""
    for part in key.split("."):
        cfg = getattr(cfg, part, None)
        if cfg is None:
            return None
    return cfg


def stage_precision(cfg) -> str | None:
    """The precision a stage config computes in: its :data:`PRECISION_KEYS` resolved (:func:`precision_name`); one
    name when they agree, ``key=name,...`` when they do not, None when it has none."""
    found = {key: precision_name(value) for key in PRECISION_KEYS if (value := _setting(cfg, key)) is not None}
    if len(set(found.values())) == 1:
        return next(iter(found.values()))
    return ",".join(f"{k}={v}" for k, v in found.items()) or None


def cpu_info(cpuinfo: str | None = None) -> dict:
    """``{"model": the CPU's model name, "flags": those of :data:`CPU_FLAGS` it has}`` from ``/proc/cpuinfo``
    (``cpuinfo``: that file's text, for tests); ``model`` falls back to ``platform.processor()`` (None when empty)
    and ``flags`` is empty without /proc (not Linux)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    model, flags = None, set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model is None:
            model = value.strip() or None
        elif key.strip() == "flags":
            flags.update(value.split())
    return {"model": model or platform.processor() or None, "flags": [f for f in CPU_FLAGS if f in flags]}


def _threads() -> int:
    import torch  # deferred: imports torch

    return torch.get_num_threads()


def run_provenance() -> dict:
    """The run's provenance (the module docstring): ``precision`` is what ``mixed_precision=auto`` computes in here
    (each stage records its own: :func:`stage_provenance`)."""
    return {"precision": precision_name("auto"), "threads": _threads(), "git_commit": git_commit(),
            "versions": package_versions(), "cpu": cpu_info()}


def stage_provenance(cfg, run: dict) -> dict:
    """One stage's provenance: ``run`` (:func:`run_provenance`) with the precision of the stage's config
    (:func:`stage_precision`) and torch's threads now."""
    return {**run, "precision": stage_precision(cfg), "threads": _threads()}


def provenance_differences(recorded: dict | None, now: dict) -> list[str]:
    """``"field: recorded a != now b"`` for each field of :data:`FIELDS` that differs (each package of ``versions``
    on its own); a ``-dirty`` commit differs from any commit, itself included; a stage recorded without provenance
    (by an earlier version) differs in every field."""
    if not isinstance(recorded, dict):
        return ["provenance not recorded (a stage of an earlier version)"]
    out = []
    for key in FIELDS:
        a, b = recorded.get(key, "<absent>"), now.get(key)
        if key == "versions" and isinstance(a, dict) and isinstance(b, dict):
            out += [f"versions.{p}: recorded {a.get(p, '<absent>')} != now {b.get(p, '<absent>')}"
                    for p in sorted(set(a) | set(b)) if a.get(p, "<absent>") != b.get(p, "<absent>")]
        elif key == "git_commit" and a == b and isinstance(a, str) and a.endswith(DIRTY):
            out.append(f"git_commit: {a} (a tree with uncommitted changes matches no other run)")
        elif a != b:
            out.append(f"{key}: recorded {a} != now {b}")
    return out


def differing_fields(stage: dict | None, run: dict, skip: tuple[str, ...] = ()) -> dict:
    """The fields of :data:`RECORDED` (less ``skip``) of a stage's provenance whose value differs from the run's
    (``{}`` when none; a field the stage did not record, e.g. ``cpu`` by an earlier version, differs)."""
    if not isinstance(stage, dict):
        return {"provenance": None}
    return {k: stage.get(k) for k in RECORDED if k not in skip and stage.get(k) != run.get(k)}


def stage_precisions(made_under: dict[str, dict | None]) -> dict[str, str | None]:
    """``{stage: the precision it computed in}`` of the recipe stages' provenance (``made_under``: the stage
    runner's, recorded when reused, now when run; None: a stage recorded without provenance or without a precision
    setting)."""
    return {name: (made or {}).get("precision") for name, made in made_under.items()}


def ran_in(precisions: dict[str, str | None]) -> str | None:
    """One name for the precision a run's stages computed in: theirs when every stage that has one agrees,
    ``mixed`` when they do not (``stage_precision`` says which), None when none has one."""
    names = {p for p in precisions.values() if p is not None}
    return names.pop() if len(names) == 1 else ("mixed" if names else None)
