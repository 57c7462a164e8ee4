"""The on-disk cache of built model directories (GGUF conversions, the tiny model presets), checked on every load.

An entry is ``<cache root>/<name>/``, built by a function into a temporary sibling ``.<name>.tmp-*`` and renamed
into place. Its ``COMPLETE`` file, written last, is the manifest: every file's size and sha256 (``config.json``
among them). :func:`cached_build` returns an entry only after :func:`entry_problem` finds nothing wrong:

- every load: the files on disk are the manifest's, each of its recorded size, and every file under
  :data:`HASH_EVERY_LOAD_BELOW` bytes (the config, the tokenizer) matches its sha256;
- larger files (the weights) are hashed on the first load in a process, and again whenever the file's size,
  mtime, ctime or inode changes (an overwrite in place changes its ctime, which nothing can set back).

A damaged entry (a file missing, resized, overwritten or edited; no manifest, or none at all: an entry from
before manifests were kept) is never returned: it is built again into a fresh directory, which then replaces it
(one line says why). A model directory given directly (``model.path=<cache root>/gguf-...``) is checked by
:func:`check_cache_entry` and refused in one line naming the directory and the remedy.

Builds of one entry take turns under an exclusive lock on ``<cache root>/.<name>.lock`` (``flock``: the kernel
releases it when its process dies; the file exists while a build runs), so a second process waits for the first
one's result instead of building a copy. Each build first removes what builds whose process is gone left behind:
temporary directories (``.<name>.tmp-*``, ``.<name>.old-*``) and lock files whose lock nobody holds, and the
lockless temporary directories of earlier versions once untouched for :data:`STALE_UNLOCKED_S`; never those of a
live build.

The cache root is ``$SELECTRUST_CACHE`` (default ``~/.cache/selectrust``); one that cannot be written fails in one
line naming it.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from ..core import hashing
from .errors import ModelSourceError
import fcntl

MARKER = "COMPLETE"
FORMAT = "selectrust-model-cache/1"
HASH_EVERY_LOAD_BELOW = 16 << 20  # bytes: files smaller than this (config, tokenizer) are hashed on every load
STALE_UNLOCKED_S = 3600  # an earlier version's lockless temporary directory is removed once this old
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.(?:tmp|old)-[^/]+")
_UNLOCKED_TEMPORARY = re.compile(r"\.(?P<name>.+)-[a-z0-9_]{8}")  # tempfile.mkdtemp(prefix=".<name>-")


class ModelCacheError(ModelSourceError, RuntimeError):
    """A cache entry or root that cannot be used; the message (one line) names the directory and the remedy (a
    :class:`~selectrust.model.errors.ModelSourceError`: one line, exit 2 under the error contract)."""


def cache_root() -> Path:
    return Path(os.environ.get("SELECTRUST_CACHE", Path.home() / ".cache" / "selectrust")).expanduser()


def _files(entry: Path) -> list[str]:
    return sorted(p.relative_to(entry).as_posix() for p in entry.rglob("*") if p.is_file() and p.name != MARKER)


def write_manifest(entry: Path) -> dict:
    """Write ``COMPLETE``: the size and sha256 of every file under ``entry``; returns the manifest."""
    files = {rel: {"size": (entry / rel).stat().st_size, "sha256": hashing.file_sha256(entry / rel)}
             for rel in _files(entry)}
    manifest = {"format": FORMAT, "files": files}
    (entry / MARKER).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def read_manifest(entry: Path) -> dict | None:
    """The manifest of ``entry``, or None when its ``COMPLETE`` is absent or holds none (an earlier version's)."""
    try:
        manifest = json.loads((entry / MARKER).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(manifest, dict) and manifest.get("format") == FORMAT and isinstance(manifest.get("files"), dict)
    ok = ok and all(isinstance(r, dict) and isinstance(r.get("size"), int) and isinstance(r.get("sha256"), str)
                    for r in manifest["files"].values())
    return manifest if ok else None


def _marker_problem(marker: Path) -> str:
    """Why ``marker`` (a ``COMPLETE`` file that :func:`read_manifest` refused) holds no manifest: a marker that
    starts as JSON (``{``) was written by a checking version and is damaged or cut short; any other text is an
    earlier version's plain marker."""
    try:
        text = marker.read_text(errors="replace")
    except OSError as e:
        return f"{MARKER} is unreadable: {e.strerror or e}"
    if text.lstrip().startswith("{"):
        try:
            json.loads(text)
        except ValueError:
            return f"its {MARKER} manifest is truncated or damaged (not valid JSON)"
        return f"its {MARKER} manifest is damaged (not a {FORMAT} manifest)"
    return f"its {MARKER} marker holds no manifest: an entry from before entries were checked"


def entry_problem(entry: Path) -> str | None:
    """None when ``entry`` is a complete entry that matches its manifest (the rule in the module docstring), else
    what is wrong, naming the file."""
    if not entry.is_dir():
        return "absent"
    if not (entry / MARKER).is_file():
        return f"no {MARKER} marker"
    manifest = read_manifest(entry)
    if manifest is None:
        return _marker_problem(entry / MARKER)
    files = manifest["files"]
    try:
        on_disk = _files(entry)
        if missing := sorted(set(files) - set(on_disk)):
            return f"{missing[0]} is missing"
        if extra := sorted(set(on_disk) - set(files)):
            return f"{extra[0]} is not in its manifest"
        for rel, want in files.items():
            if (size := (entry / rel).stat().st_size) != want["size"]:
                return f"{rel} has {size} bytes, {want['size']} were written"
        for rel, want in sorted(files.items(), key=lambda kv: kv[1]["size"]):  # the config first, weights last
            small = want["size"] < HASH_EVERY_LOAD_BELOW
            digest = hashing.file_sha256(entry / rel) if small else hashing.file_sha256_once(entry / rel)
            if digest != want["sha256"]:
                return f"{rel} does not match its recorded sha256"
    except OSError as e:
        return f"unreadable: {e.strerror or e}: {e.filename}"
    return None


def check_cache_entry(path: str | Path) -> None:
    """Refuse (one line) a cache entry loaded by its directory that fails its check. An entry is a directory with a
    manifest, or any directory directly in the cache root; every other directory passes unchecked."""
    entry = Path(path).expanduser()
    if not entry.is_dir():
        return
    if read_manifest(entry) is None and entry.resolve().parent != cache_root().resolve():
        return
    if (problem := entry_problem(entry)) is not None:
        raise ModelCacheError(f"model cache entry {entry} is damaged: {problem}; remove it (rm -r {entry}) and load "
                              f"its source again (pkg:<module>, the .gguf file or tiny:<preset>), which rebuilds it")


def _unwritable(root: Path, e: OSError, target: Path, problem: str) -> ModelCacheError:
    why = f"{target} is damaged ({problem}) and " if problem != "absent" else ""
    return ModelCacheError(f"model cache: {why}the cache root {root} cannot be written ({e.strerror or e}); make it "
                           f"writable or set SELECTRUST_CACHE to a writable directory (default ~/.cache/selectrust)")


@contextmanager
def _entry_lock(root: Path, name: str, target: Path, problem: str):
    """Hold ``<root>/.<name>.lock`` exclusively (waiting, with one line, while another process builds); the file
    is removed on release (a waiter that then holds a removed file's lock opens the new one and waits again)."""
    path = root / f".{name}.lock"
    while True:
        try:
            root.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise _unwritable(root, e, target, problem) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            print(f"[selectrust] model cache: waiting for process {holder}, which is building {target}", flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
        os.close(fd)  # releases the lock


def _lock_free(root: Path, name: str) -> bool:
    """True when no process holds ``<root>/.<name>.lock``; a lock file left by a process that is gone is removed
    (taken, checked to be the file at that path, removed, released: as :func:`_entry_lock` does)."""
    path = root / f".{name}.lock"
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino != os.stat(path).st_ino:
            return False  # replaced meanwhile: a new holder's
        os.unlink(path)
        return True
    except FileNotFoundError:
        return True  # removed meanwhile by its holder, which has finished
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    finally:
        os.close(fd)


def remove_dead_temporaries(root: Path, held: str) -> list[str]:
    """Remove what builds whose process is gone left in ``root``: the temporary directories of ``held`` (whose
    lock this process holds) and of entries whose lock is free, those lock files, and lockless temporary
    directories of earlier versions once :data:`STALE_UNLOCKED_S` old. Returns the names removed."""
    removed = []
    for d in sorted(root.iterdir()):
        if not d.name.startswith("."):
            continue
        if d.name.endswith(".lock") and d.is_file():
            if d.name != f".{held}.lock" and _lock_free(root, d.name[1:-len(".lock")]):
                removed.append(d.name)
            continue
        if not d.is_dir():
            continue
        if m := _TEMPORARY.fullmatch(d.name):
            dead = m["name"] == held or _lock_free(root, m["name"])
        elif _UNLOCKED_TEMPORARY.fullmatch(d.name):
            dead = time.time() - d.stat().st_mtime > STALE_UNLOCKED_S
        else:
            continue
        if dead:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d.name)
    return removed


def _move_into_place(tmp: Path, target: Path, name: str) -> bool:
    """Rename ``tmp`` to ``target`` (False: a sound entry got there first); a damaged ``target`` (checked under the
    lock) is moved aside first, then removed."""
    aside = None
    if target.exists():
        aside = target.parent / f".{name}.old-{os.getpid()}-{time.time_ns()}"
        os.rename(target, aside)
    try:
        os.rename(tmp, target)
        moved = True
    except OSError:  # only a build that keeps no lock (an earlier version) can have put one there
        if entry_problem(target) is not None:
            raise ModelCacheError(f"model cache: {target} was replaced while it was rebuilt; run again") from None
        moved = False
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
    return moved


def cached_build(root: str | Path | None, name: str, build) -> Path:
    """``<root>/<name>`` (``root`` None = :func:`cache_root`), checked (:func:`entry_problem`) on every call, and
    built by ``build(tmp_dir)`` when absent or damaged: in a temporary directory beside it, under the entry's lock,
    with the manifest written last, then renamed into place. The tiny model presets and GGUF conversions use it."""
    root = Path(root) if root is not None else cache_root()
    target = root / name
    if (problem := entry_problem(target)) is None:
        return target
    with _entry_lock(root, name, target, problem):
        remove_dead_temporaries(root, held=name)
        if (problem := entry_problem(target)) is None:  # built (or rebuilt) by the process this one waited for
            return target
        if problem != "absent":
            print(f"[selectrust] model cache: {target} is damaged: {problem}; building it again", flush=True)
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=root))
        except OSError as e:
            raise _unwritable(root, e, target, problem) from None
        try:
            build(tmp)
            manifest = write_manifest(tmp)
            moved = _move_into_place(tmp, target, name)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    if moved:  # hashed as written: the first load in this process need not hash them again
        for rel, rec in manifest["files"].items():
            hashing.remember_file_sha256(target / rel, rec["sha256"])
    return target
