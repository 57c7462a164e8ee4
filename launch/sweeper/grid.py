"""The grid: command-line overrides in Hydra sweep syntax, expanded into their cartesian product, and one
:class:`~launch.sweeper.jobs.Job` per point with its run directory and command."""

from __future__ import annotations

import itertools
import re
import shlex
import sys
from pathlib import Path
from typing import Optional, Sequence

from launch.sweeper.jobs import RUN_DIR_KEY, Job, SweepError
from launch.sweeper.naming import job_names


def parse_overrides(overrides: Sequence[str]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """Split command-line overrides into fixed ones (passed through verbatim) and swept ones.

    Returns ``(fixed, swept)`` where ``swept`` is ``[(key, [value, ...]), ...]`` in command-line order;
    each value is a Hydra-serialised string (quoted where needed), so ``f"{key}={value}"`` is a valid
    override that Hydra parses back to the same value.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    fixed: list[str] = []
    swept: list[tuple[str, list[str]]] = []
    seen: dict[str, str] = {}
    parser = OverridesParser.create()
    for raw in overrides:
        try:
            (ov,) = parser.parse_overrides([raw])
        except HydraException as e:
            raise SweepError(f"override {raw!r}: not valid Hydra override syntax: {e}") from None
        key = ov.get_key_element()
        bare = key.lstrip("+~")
        if bare in seen:
            raise SweepError(f"override {raw!r}: key {bare!r} is already given by {seen[bare]!r}; "
                             f"give each key once (a sweep is written k=a,b,c)")
        seen[bare] = raw
        if bare == RUN_DIR_KEY:
            raise SweepError(f"override {raw!r}: {RUN_DIR_KEY} is set by the sweep "
                             f"(<out>/<name>/<job>); use --out and --name instead")
        if not ov.is_sweep_override():
            fixed.append(raw)
            continue
        if not ov.is_discrete_sweep():
            raise SweepError(f"override {raw!r}: only discrete sweeps are supported "
                             f"(a,b,c | range(start,stop[,step]) | choice(...)), not interval()")
        try:
            values = list(ov.sweep_string_iterator())
        except Exception as e:  # glob() over config groups needs Hydra's config loader
            raise SweepError(f"override {raw!r}: cannot enumerate this sweep here ({e}); "
                             f"list the values explicitly, e.g. {bare}=a,b,c") from None
        if not values:
            raise SweepError(f"override {raw!r}: the sweep has no values")
        if len(set(values)) != len(values):
            raise SweepError(f"override {raw!r}: repeated values {values}; each value must appear once")
        swept.append((key, values))
    return fixed, swept


def expand(overrides: Sequence[str]) -> tuple[list[str], list[dict[str, str]], list[str]]:
    """Cartesian product of the swept overrides (last key varies fastest).

    Returns ``(fixed, combos, names)``: the fixed overrides, one ``{key: value}`` per job, and one
    distinct filesystem-safe name per job.
    """
    fixed, swept = parse_overrides(overrides)
    keys = [k for k, _ in swept]
    combos = [dict(zip(keys, vals)) for vals in itertools.product(*[v for _, v in swept])]
    return fixed, combos, job_names(keys, combos)


def hydra_quote(value: str) -> str:
    """Quote a string for a Hydra override value when it has characters Hydra would interpret."""
    if re.fullmatch(r"[A-Za-z0-9_./:+-]+", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def build_jobs(recipe: str, sweep_name: str, out: str | Path, overrides: Sequence[str], *,
               accelerate_config: Optional[str] = None, accelerate_args: str = "",
               python: str = sys.executable, accelerate_cmd: Sequence[str] | None = None) -> list[Job]:
    """Expand ``overrides`` into jobs with run directories under ``<out>/<sweep_name>/`` and commands.

    Without ``accelerate_config`` a job is ``python <recipe> <overrides>``; with it,
    ``<accelerate_cmd> --config_file <cfg> <accelerate_args> <recipe> <overrides>`` where
    ``accelerate_cmd`` defaults to ``python -m accelerate.commands.launch`` (= ``accelerate launch``
    from the same interpreter). ``accelerate_args`` is one shell string: split for ``command``, kept
    verbatim in ``shell`` so that e.g. ``--machine_rank $SLURM_NODEID`` expands on each node.
    """
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", sweep_name):
        raise SweepError(f"--name {sweep_name!r}: use letters, digits and ._- (it becomes a directory name)")
    fixed, combos, names = expand(overrides)
    sweep_dir = Path(out).expanduser().resolve() / sweep_name
    if accelerate_config is not None:
        launcher = list(accelerate_cmd or [python, "-m", "accelerate.commands.launch"])
        launcher += ["--config_file", accelerate_config]
        try:
            extra = shlex.split(accelerate_args)
        except ValueError as e:
            raise SweepError(f"--accelerate-args {accelerate_args!r}: {e}") from None
    else:
        if accelerate_args.strip():
            raise SweepError("--accelerate-args needs --accelerate-config")
        launcher, extra = [python], []
    jobs = []
    for combo, name in zip(combos, names):
        run_dir = sweep_dir / name
        rest = [recipe, *fixed, *[f"{k}={v}" for k, v in combo.items()],
                f"{RUN_DIR_KEY}={hydra_quote(str(run_dir))}"]
        shell = " ".join(x for x in (shlex.join(launcher), accelerate_args.strip(), shlex.join(rest)) if x)
        jobs.append(Job(name=name, swept=combo, run_dir=run_dir, command=[*launcher, *extra, *rest],
                        shell=shell))
    return jobs
