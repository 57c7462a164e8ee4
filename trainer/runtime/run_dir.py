"""What a run directory guarantees (see the README's "Reliability" section):

- **one writer**: :class:`RunLock` holds an exclusive ``flock`` on ``<run_dir>/.lock`` for the life of the
  run (the kernel drops it when the process dies, so a crash never leaves it held); the file names the
  holder's host and pid, so a second run refuses at once saying who holds it, and a lock file left by a
  dead process on this host is taken over with a message;
- **data pinned by hash**: ``data_hashes.json`` records the SHA-256 of every data source (training data and
  evaluation items: a file, what a ``toy:`` source resolves to, a ``save_to_disk`` directory's files, an
  ``hf:`` dataset's rows; ``trainer/data/pins.py``) when a run starts; a resume whose data differs is refused naming the file and both
  hashes (``trainer.allow_data_change=true`` overrides);
- **resume or refuse**: ``trainer.resume=none`` into a directory that holds a previous run is refused;
  ``trainer.overwrite=true`` first moves the old run aside to ``<run_dir>.old-<n>``;
- **same config on resume**: :func:`check_resume_config` refuses a resume whose config differs from the
  saved ``config.yaml`` in any key outside :data:`RESUME_TOLERATED` (``trainer.allow_config_change=true``
  overrides); a directory with nothing to resume (:func:`nothing_to_keep`: a ``config.yaml`` but no checkpoint,
  ``final/`` or ``run_complete.json``) takes a corrected command as a fresh start.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import time
from dataclasses import asdict, is_dataclass
from pathlib import Path

from selectrust.core.errors import ConfigError
from trainer.runtime.checkpoint import (CHECKPOINTS, CheckpointManager, checkpoints_dir, complete_checkpoints, run_dir_of,
                                     step_of, verify_checkpoint)
from trainer.runtime.distributed import all_gather_object
from trainer.runtime.nodes import Nodes, common_steps, detect, local_checkpoint, no_common_checkpoint
from trainer.data.pins import pin
from .relocation import portable_pair  # a run moved with its inputs (a demo's out dir) resumes
import fcntl

LOCK_NAME = ".lock"
DATA_HASHES = "data_hashes.json"
# Entries that mean "a run started training here" (meta.json and data_hashes.json are written by any start).
PREVIOUS_RUN_MARKERS = ("config.yaml", "metrics.jsonl", CHECKPOINTS, "final", "run_complete.json")


class RunDirLocked(ConfigError, RuntimeError):
    """Another live process holds the run directory: the user's input (another ``trainer.run_dir``, or wait), so
    a ``ConfigError`` (one line, exit 2 under the error contract); still a ``RuntimeError`` for older callers."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_HELD: dict[str, "RunLock"] = {}  # run dirs this process holds (an in-process rerun releases the old hold)


def held_message(run_dir: Path, holder: dict, lock_path: Path, key: str) -> str:
    """The refusal of a run dir another run holds (``holder``: its lock file's host, pid, start), the one line both
    the config's pre-check (``trainer/config/out_dir.py``) and :class:`RunLock` give."""
    return (f"{run_dir} is in use by another run (host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, "
            f"started {holder.get('started', '?')}; lock file {lock_path}). Wait for it to finish, stop it, "
            f"or use another {key}.")


class RunLock:
    """Exclusive lock on a run directory; :meth:`acquire` raises :class:`RunDirLocked` naming the holder."""

    def __init__(self, run_dir: Path, key: str = "trainer.run_dir"):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.key = key  # the setting that chose the directory (named in a refusal)
        self._fd: int | None = None

    def _holder(self) -> dict:
        try:
            return json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}

    def acquire(self) -> "RunLock":
        previous = _HELD.pop(str(self.run_dir), None)
        if previous is not None:  # this process ran here before (recipes are synchronous): that run is over
            previous.release()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        holder = self._holder()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                os.close(fd)  # no flock on this filesystem: fall back to the recorded holder
                if holder and (holder.get("host") != socket.gethostname() or _pid_alive(int(holder.get("pid", 0)))):
                    raise self._refusal(holder) from e
            else:
                os.close(fd)
                raise self._refusal(self._holder()) from None
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if holder.get("pid") and holder.get("host") == socket.gethostname() and holder["pid"] != os.getpid():
            print(f"[selectrust] {self.path}: taking over a stale lock of pid {holder['pid']} on this host "
                  f"(started {holder.get('started')}; that process is gone)", flush=True)
        me = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
        os.fsync(fd)
        self._fd = fd
        _HELD[str(self.run_dir)] = self
        return self

    def _refusal(self, holder: dict) -> RunDirLocked:
        return RunDirLocked(held_message(self.run_dir, holder, self.path, self.key))

    def release(self) -> None:
        """Empty the lock file (so no stale holder is reported) and drop the lock; idempotent."""
        if self._fd is None:
            return

        try:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)
            self._fd = None
            if _HELD.get(str(self.run_dir)) is self:
                del _HELD[str(self.run_dir)]


# -- data pinned by hash -------------------------------------------------------------------------


def data_files(cfg) -> dict[str, str]:
    """``config key -> path`` of every data file the run reads (a data-source path ``<source>:<rest>`` has none)."""
    keys = []
    if hasattr(cfg, "data"):
        keys.append(("data.train_path", cfg.data.train_path))
    if hasattr(cfg, "eval") and cfg.eval.enabled and cfg.eval.path:
        keys.append(("eval.path", cfg.eval.path))
    return {k: str(Path(p).expanduser().resolve()) for k, p in keys if p and Path(p).expanduser().is_file()}


def data_paths(cfg) -> dict[str, str]:
    """``config key -> path as configured`` of every data source the run reads (files, data sources,
    ``hf:`` ids, saved-dataset directories)."""
    keys = {}
    if hasattr(cfg, "data") and cfg.data.train_path:
        keys["data.train_path"] = str(cfg.data.train_path)
    if hasattr(cfg, "eval") and cfg.eval.enabled and cfg.eval.path:
        keys["eval.path"] = str(cfg.eval.path)
    return keys


def data_hashes(cfg) -> dict[str, dict]:
    """``config key -> {"path", "sha256", "kind"}`` for every data source of the run, whatever its kind
    (``trainer/data/pins.py``)."""
    pins = {k: pin(p) for k, p in data_paths(cfg).items()}
    return {k: v for k, v in pins.items() if v is not None}


def write_data_hashes(run_dir: Path, hashes: dict) -> None:
    tmp = run_dir / (DATA_HASHES + ".tmp")
    tmp.write_text(json.dumps(hashes, indent=2) + "\n")
    os.replace(tmp, run_dir / DATA_HASHES)


def check_data_unchanged(source_run: Path, hashes: dict, *, allow: bool) -> list[str]:
    """Compare ``hashes`` with the ones ``source_run`` recorded; raise a ``ConfigError`` naming every changed
    file and both hashes (a warning list when ``allow``). A run from before hashes were kept passes."""
    recorded_path = source_run / DATA_HASHES
    if not recorded_path.exists():
        return []
    recorded = json.loads(recorded_path.read_text())
    diffs = []
    # a key the run did not record: a source kind that was not pinned when it started (no hash to compare)
    for key in sorted(set(recorded) | (set(hashes) & _pinned_since(recorded, hashes))):
        a, b = recorded.get(key, {}), hashes.get(key, {})
        if a.get("sha256") != b.get("sha256"):
            diffs.append(f"{key}: {b.get('path', a.get('path', '?'))}: sha256 at the run's start "
                         f"{a.get('sha256', '<absent>')} != now {b.get('sha256', '<absent>')}")
    if diffs and not allow:
        raise ConfigError(f"refusing to resume {source_run}: its data changed since the run started "
                          f"(the saved sampler position would apply to different rows):\n  " + "\n  ".join(diffs)
                          + "\nRestore the data, use a new trainer.run_dir, or pass trainer.allow_data_change=true.")
    return diffs


def _pinned_since(recorded: dict, hashes: dict) -> set[str]:
    """Keys absent from ``recorded`` that count as a difference: a plain file (pinned since hashes were kept)."""
    return {k for k, v in hashes.items() if k not in recorded and v.get("kind", "file") == "file"
            and "source" not in v}


# -- resume or refuse ----------------------------------------------------------------------------
def previous_run(run_dir: Path) -> list[str]:
    """Entries of ``run_dir`` that show a run already trained there (empty when none)."""
    found = []
    for name in PREVIOUS_RUN_MARKERS:
        p = run_dir / name
        if p.is_dir() and any(p.iterdir()) or p.is_file() and p.stat().st_size > 0:
            found.append(name)
    return found


def nothing_to_keep(run_dir: Path) -> bool:
    """True when ``run_dir`` holds no checkpoint, ``final/`` or ``run_complete.json``: at most a ``config.yaml`` and
    metrics of a start that failed before its first checkpoint (``optim.lr=inf``). A fresh start there rewrites
    both (``config.yaml`` when training starts, the metrics truncated to step 0), so its config need not equal the
    one saved: there is nothing to resume."""
    return not set(previous_run(run_dir)) - {"config.yaml", "metrics.jsonl"}


def move_aside(run_dir: Path) -> Path:
    """Move everything but the lock file into a fresh ``<run_dir>.old-<n>``; returns that directory."""
    n = 1
    while (dest := run_dir.with_name(f"{run_dir.name}.old-{n}")).exists():
        n += 1
    dest.mkdir()
    for entry in run_dir.iterdir():
        if entry.name != LOCK_NAME:
            shutil.move(str(entry), str(dest / entry.name))
    return dest


def prepare_fresh_or_refuse(run_dir: Path, tcfg) -> None:
    """``trainer.overwrite=true``: move a previous run aside. ``trainer.resume=none`` into a directory
    holding a previous run: refuse (its checkpoints, ``final/`` and ``run_complete.json`` would mix with
    the new run's)."""
    found = previous_run(run_dir)
    if not found:
        return
    if tcfg.overwrite:
        dest = move_aside(run_dir)
        print(f"[selectrust] trainer.overwrite=true: moved the previous run in {run_dir} to {dest}", flush=True)
    elif tcfg.resume == "none":
        raise ConfigError(f"trainer.resume=none but {run_dir} holds a previous run ({', '.join(found)}): a new run "
                          f"there would mix with it. Use trainer.resume=auto to continue it, "
                          f"trainer.overwrite=true to move it aside to {run_dir.name}.old-<n> and start over, "
                          f"or another trainer.run_dir.")


# Keys that may differ between a run and its resumption without changing the maths.
RESUME_TOLERATED = ("trainer.resume", "trainer.stop_at_step", "trainer.allow_config_change", "trainer.progress",
                    "trainer.allow_data_change", "trainer.overwrite", "trainer.run_dir",
                    "trainer.save_every", "trainer.keep_last", "trainer.run_dir_layout", "trainer.dist_timeout_s",
                    "logger.",
                    # where the generation server is and how patiently to talk to it (a restarted server)
                    "generation.url", "generation.server_log", "generation.timeout_s", "generation.max_retries")
# Groups whose keys are those of a choice made within them (``generation.backend``): a saved key such a group no
# longer has is not a difference. Before each generation backend had a schema of its own, ``generation`` held every
# backend's keys, those of the other backends unused; a change of backend is still reported (``generation.backend``).
RESUME_CHOSEN_KEYS = ("generation.",)


def config_differences(saved: dict, current: dict, prefix: str = "", *, defaults: dict | None = None) -> list[str]:
    """``"key: saved a != now b"`` for every key whose value differs (``RESUME_TOLERATED`` keys aside).

    ``defaults`` (the schema's defaults, same nesting): a key *absent* from ``saved`` whose current value is its
    schema default is not a difference: the key was added to the schema after the run started, and its default
    keeps the behaviour the run had. A key absent *now* (removed or renamed since) is reported, except in the groups of
    ``RESUME_CHOSEN_KEYS`` (a key the chosen generation backend does not have)."""
    out = []
    for k in sorted(set(saved) | set(current)):
        key = f"{prefix}{k}"
        a, b = saved.get(k, "<absent>"), current.get(k, "<absent>")
        d = defaults.get(k, "<absent>") if isinstance(defaults, dict) else "<absent>"
        if isinstance(a, dict) and isinstance(b, dict):
            out.extend(config_differences(a, b, key + ".", defaults=d if isinstance(d, dict) else None))
        elif a == "<absent>" and b != "<absent>" and _same(b, d):
            continue
        elif b == "<absent>" and a != "<absent>" and key.startswith(RESUME_CHOSEN_KEYS):
            continue
        elif a != b and not any(key == t or (t.endswith(".") and key.startswith(t)) for t in RESUME_TOLERATED):
            out.append(f"{key}: saved {a!r} != now {b!r}")
    return out


def _same(value, default) -> bool:
    """``value`` equals a schema default (a new sub-config absent from the saved run: every leaf at its default)."""
    if isinstance(value, dict) and isinstance(default, dict):
        return set(value) <= set(default) and all(_same(v, default[k]) for k, v in value.items())
    return default != "<absent>" and value == default


def schema_defaults(cfg) -> dict | None:
    """The defaults of ``cfg``'s structured schema as a plain dict (None for a config without one)."""
    from omegaconf import OmegaConf  # deferred: imports omegaconf

    schema = type(cfg) if is_dataclass(cfg) else OmegaConf.get_type(cfg)  # typed settings, or a composed config
    if schema is None or schema is dict:
        return None
    return OmegaConf.to_container(OmegaConf.structured(schema), resolve=False, throw_on_missing=False)


def check_resume_config(cfg, saved_path: Path) -> None:
    """Refuse a config ``cfg`` that differs from the saved one at ``saved_path`` (this run's ``config.yaml``;
    for ``trainer.resume=<path>`` the config of the run owning that checkpoint). No saved config: nothing to check."""
    from omegaconf import OmegaConf  # deferred: imports omegaconf

    if not saved_path.exists() or cfg.trainer.allow_config_change:
        return

    saved = OmegaConf.to_container(OmegaConf.load(saved_path), resolve=True)
    current = asdict(cfg)  # the typed settings, as config.yaml holds them
    diffs = config_differences(*portable_pair(saved, current, "trainer.run_dir"), defaults=schema_defaults(cfg))
    if diffs:
        raise ConfigError(
            f"refusing to resume {saved_path.parent} with a changed config ({len(diffs)} differing keys):\n  "
            + "\n  ".join(diffs)
            + "\nPass trainer.allow_config_change=true to resume anyway, or use a new trainer.run_dir.")


# -- fresh start or resume: the one decision, taken once per run -----------------------------------------------
def open_run_dir(cfg, accelerator, run_dir: Path) -> tuple[RunLock | None, Path | None, Nodes]:
    """Claim ``run_dir`` for this run and decide how it starts. First the nodes are found and whether they share
    ``run_dir`` (:func:`trainer.runtime.nodes.detect`; refused in one line if ``trainer.run_dir_layout`` disagrees).
    The directory's owner (the main process; with node-local directories each node's local rank 0) takes the lock
    (one writer), moves aside or refuses a previous run (:func:`prepare_fresh_or_refuse`) and picks the checkpoint
    to resume (``trainer.resume``; verified, ``CheckpointManager.resolve_resume``; node-local: the newest step
    complete on every node); every rank learns the outcome before anything starts. A resume must then see the
    config and the data of the run it continues; a fresh start records the data hashes. Returns
    ``(lock, resume_from, nodes)``: the lock on an owner (None elsewhere), this node's copy of the checkpoint to
    continue (None: a fresh start), the nodes. A refusal releases the lock and raises on every rank."""
    nodes = detect(accelerator, run_dir, getattr(cfg.trainer, "run_dir_layout", "auto"))
    owner = nodes.owner(accelerator)
    lock, error, resume_from, source_run, steps = None, None, None, run_dir, []
    if owner:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            lock = RunLock(run_dir).acquire()
            prepare_fresh_or_refuse(run_dir, cfg.trainer)
            if nodes.node_local:
                steps = _local_steps(run_dir, cfg.trainer.resume, accelerator)
            else:
                resume_from = CheckpointManager(run_dir, accelerator).resolve_resume(cfg.trainer.resume)
                source_run = run_dir_of(resume_from) if resume_from is not None else run_dir
        except Exception as e:  # noqa: BLE001 - re-raised below; the other ranks learn of it first
            error = e
            if lock is not None:
                lock.release()
    if nodes.node_local:
        resume_from, source_run = _agree_node_local(accelerator, nodes, error, steps if owner else None, run_dir,
                                                    cfg.trainer.resume)
    else:
        resume_from, source_run = _agree_on_start(accelerator, error, resume_from, source_run)
    try:
        error, hashes = None, {}
        pins_here = nodes.count > 1 and accelerator.is_local_main_process  # every node checks its own data
        try:
            hashes = data_hashes(cfg) if accelerator.is_main_process or pins_here else {}
            _check_resume(cfg, run_dir, resume_from, source_run, hashes, is_main=accelerator.is_main_process)
        except Exception as e:  # noqa: BLE001 - raised on every rank by _agree_errors
            error = e
        pins = {k: v.get("sha256") for k, v in hashes.items()} if pins_here else None
        _agree_errors(accelerator, error, node_data=(nodes.node, pins) if nodes.count > 1 else None)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    return lock, resume_from, nodes


def _local_steps(run_dir: Path, resume: str, accelerator) -> list[int]:
    """Node-local directories: the steps of this node's complete checkpoints that ``trainer.resume`` may pick
    (``auto``: all of them, verified later; a path: that one, verified now; ``none``: none)."""
    if resume == "none":
        return []
    if resume == "auto":
        return [step_of(p) for p in complete_checkpoints(checkpoints_dir(run_dir))]
    return [step_of(CheckpointManager(run_dir, accelerator).resolve_resume(resume))]


_REFUSALS = ("ConfigError", "RunDirLocked")  # an owner's refusal that every rank reports as a ConfigError


def _raise_for_others(failures: list[tuple[str, str]], who: str) -> None:
    """Raise on a rank that did not fail what a rank that did reported: a ``ConfigError`` (a refusal: one line,
    exit 2) as such, anything else as a ``RuntimeError`` naming ``who``."""
    if failures:
        kind, message = failures[0]
        if kind in _REFUSALS:
            raise ConfigError(message)
        raise RuntimeError(f"{who} could not start the run: {kind}: {message}")


def _agree_errors(accelerator, error: BaseException | None, node_data: tuple | None = None) -> None:
    """Raise ``error`` where it happened, and on every other rank too (:func:`_raise_for_others`), so that no rank
    goes on to load a model and wait for ranks that stopped. Several nodes: ``node_data`` is ``(node, {config key:
    sha256})`` of the data this node reads (None on a rank that did not hash it); every node must read the same."""
    gathered = []
    if accelerator.num_processes > 1:
        mine = None if error is None else (type(error).__name__, str(error))
        gathered = all_gather_object(accelerator, (mine, node_data))
    if error is not None:
        raise error
    _raise_for_others([f for f, _ in gathered if f is not None], "another rank")
    views = sorted({d[0]: d[1] for _, d in gathered if d is not None and d[1] is not None}.items())
    first, want = views[0] if views else (0, {})
    diffs = [f"{k}: node {n} reads sha256 {pins.get(k)}, node {first} {want.get(k)}"
             for n, pins in views[1:] for k in sorted(set(pins) | set(want)) if pins.get(k) != want.get(k)]
    if diffs:
        raise ConfigError("the nodes read different data (each must read the same files): " + "; ".join(diffs))


def _agree_node_local(accelerator, nodes: Nodes, error: BaseException | None, steps: list[int] | None,
                      run_dir: Path, resume: str) -> tuple[Path | None, Path]:
    """Node-local directories: every node's owner reported its complete checkpoints (``steps``; None on the other
    ranks); the run resumes from the newest step complete and verified on every node, each rank from its own
    node's copy; a fresh start when no node holds one; else a one-line refusal on every rank."""
    mine = None if error is None else (type(error).__name__, str(error))
    gathered = all_gather_object(accelerator, (nodes.node, mine, steps))
    if error is not None:
        raise error
    _raise_for_others([m for _, m, _ in gathered if m is not None], "a node's local rank 0")
    by_node = {n: s for n, _, s in gathered if s is not None}
    if resume == "none" or not any(by_node.values()):
        return None, run_dir
    if resume != "auto":
        if len({tuple(s) for s in by_node.values()}) != 1:
            raise ConfigError(f"trainer.resume={resume!r} names different steps on the nodes ({by_node}); "
                              f"give every node the same checkpoint")
        path = local_checkpoint(run_dir, resume, next(iter(by_node.values()))[0])
        return path, run_dir_of(path)
    for step in common_steps(by_node):
        path = local_checkpoint(run_dir, resume, step)
        problem = verify_checkpoint(path) if nodes.owner(accelerator) else None
        if problem is not None:
            print(f"[selectrust] warning: node {nodes.node}: checkpoint {path} is damaged ({problem}); "
                  f"trying an older step complete on every node", flush=True)
        if all(all_gather_object(accelerator, problem is None)):
            return path, run_dir
    raise ConfigError(no_common_checkpoint(by_node, run_dir))


def _agree_on_start(accelerator, error: BaseException | None, resume_from: Path | None,
                    source_run: Path) -> tuple[Path | None, Path]:
    """The main process took the lock and chose (and verified) the checkpoint to resume, or failed to:
    every rank learns the outcome before anything starts, so no rank trains in a directory another run
    holds. Returns ``(resume_from, source_run)``: the checkpoint to resume from (None: a fresh start) and the
    run directory whose config and data it must match."""
    message = [f"{type(error).__name__}: {error}" if error is not None else None,
               None if resume_from is None else str(resume_from), str(source_run)]
    if accelerator.num_processes > 1:
        from accelerate.utils import broadcast_object_list

        broadcast_object_list(message, from_process=0)
    if error is not None:
        raise error
    if message[0] is not None:
        kind, _, text = message[0].partition(": ")
        if kind in _REFUSALS:  # the user's input (a run dir in use, a resume refused): the same one line here
            raise ConfigError(text)
        raise RuntimeError(f"the main process could not start the run: {message[0]}")
    return (None if message[1] is None else Path(message[1])), Path(message[2])


def _check_resume(cfg, run_dir: Path, resume_from: Path | None, source_run: Path, hashes: dict, *,
                  is_main: bool) -> None:
    """A resume must see the config and the data of the run it continues (``source_run``: this run, or the run
    owning the checkpoint given as ``trainer.resume=<path>``), and so must a fresh start over a run that left work
    to keep (a ``final/`` without checkpoints); a fresh start records the data hashes."""
    if resume_from is not None or not nothing_to_keep(run_dir):  # else a failed start's config.yaml: rewritten
        check_resume_config(cfg, source_run / "config.yaml")
    if not is_main:
        return
    if resume_from is not None:
        for line in check_data_unchanged(source_run, hashes, allow=cfg.trainer.allow_data_change):
            print(f"[selectrust] warning: data changed (trainer.allow_data_change=true): {line}", flush=True)
    if resume_from is None or source_run != run_dir or cfg.trainer.allow_data_change:
        write_data_hashes(run_dir, hashes)
