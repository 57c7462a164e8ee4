"""Atomic checkpoints and exact resume.

Layout: ``<run_dir>/checkpoints/step_<n>/`` holding

- ``adapter/`` (peft ``save_pretrained``, safetensors) or ``model.safetensors`` (full fine-tuning);
- ``optimizer.pt`` (tensors only, loaded with ``weights_only=True``), ``scheduler.json``;
- ``rng_rank<r>.json`` + ``rng_rank<r>.safetensors`` (python/numpy/torch/cuda RNG per rank);
- ``trainer_state.json`` (step, epoch, data-source state, counters);
- ``COMPLETE``: written last; a JSON record of every file's size and SHA-256. A directory without it is
  never loaded; on resume the files are verified against it, and a damaged newest checkpoint (truncated
  weights, say) is skipped with a warning naming the file, in favour of the previous complete one.

A save writes into ``checkpoints/.tmp-step_<n>``, fsyncs every file, renames the directory into place,
then writes the marker; older checkpoints are deleted only after that. So a SIGKILL at any point
leaves the previous complete checkpoint loadable, unlike HF Trainer (which picks the highest-numbered
directory unchecked) and accelerate's retention (which deletes before writing).
Under DeepSpeed the model/optimizer part goes through ``accelerator.save_state`` (sharded); the LR
scheduler (ours, not DeepSpeed's) is in ``scheduler.json`` either way.

Several nodes (``trainer/runtime/nodes.py``): with a shared run dir the main process writes all but the RNG files
(each rank writes its own), renames and marks; with node-local run dirs each node's local rank 0 does so in its
own directory, which then holds a full checkpoint of the whole run (every rank's RNG files, gathered): any
node's copy resumes every node.

Test hook: ``SELECTRUST_TEST_SLEEP_IN_SAVE=<phase>:<step>`` makes the save of checkpoint ``<step>``
print ``SELECTRUST_SAVE_PAUSE <phase> <step>`` and sleep at ``<phase>`` (``files``: some files written;
``before_rename``: all written and synced; ``before_marker``: renamed, no marker yet), so
``tests/trainer/runtime/test_kill_during_save.py`` can SIGKILL the process at a known point. Unset, it does nothing.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

MARKER = "COMPLETE"
TEST_PAUSE_ENV = "SELECTRUST_TEST_SLEEP_IN_SAVE"
CHECKPOINTS = "checkpoints"  # the folder of a run directory that holds its checkpoints


def checkpoints_dir(run_dir: Path | str) -> Path:
    """Where the checkpoints of the run in ``run_dir`` live."""
    return Path(run_dir) / CHECKPOINTS


def run_dir_of(checkpoint: Path) -> Path:
    """The run directory a checkpoint (``<run_dir>/checkpoints/step_<n>``) belongs to."""
    return Path(checkpoint).parent.parent


def resumable(run_dir: Path | str) -> bool:
    """True when ``run_dir`` holds at least one complete checkpoint: running it again (``trainer.resume=auto``)
    continues from there rather than starting fresh. A checkpoints directory with only a save cut short (a lone
    ``.tmp-step_N``) is not resumable: the run starts over. The one rule the stage runner
    (``recipes/stages/``) and the distillation trainer's epoch-0 evaluation ask."""
    return bool(complete_checkpoints(checkpoints_dir(run_dir)))


class DiskFullError(OSError):
    """No space left while writing a checkpoint (the earlier checkpoints are untouched)."""


def _out_of_space(e: BaseException) -> bool:
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(e)  # torch.save's zip writer reports a full disk as "... unexpected pos ..."
    return "unexpected pos" in text or "No space left" in text or "file write failed" in text


@contextlib.contextmanager
def _writing(path: Path):
    """Turn a full disk while writing ``path`` into a :class:`DiskFullError` naming it; the partial
    temporary checkpoint is removed (to free the space)."""
    try:
        yield
    except (OSError, RuntimeError) as e:
        if not _out_of_space(e):
            raise
        shutil.rmtree(path, ignore_errors=True)
        raise DiskFullError(errno.ENOSPC, f"no space left while writing {path} ({type(e).__name__}: {e}); the "
                                          f"earlier checkpoints in {path.parent} are kept") from None  # one message


def _test_pause(phase: str, step: int) -> None:
    """The kill-during-save test hook (see the module docstring); a no-op unless the variable is set."""
    want = os.environ.get(TEST_PAUSE_ENV)
    if want and want == f"{phase}:{step}":
        print(f"SELECTRUST_SAVE_PAUSE {phase} {step}", flush=True)
        time.sleep(600)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    for p in sorted(root.rglob("*")):
        if p.is_file():
            _fsync_file(p)
    for d in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
        _fsync_file(d)


def file_manifest(root: Path) -> dict[str, dict]:
    """``relative path -> {"size", "sha256"}`` of every file under ``root`` except the marker."""
    from selectrust.core.hashing import file_sha256  # deferred: tests patch it

    return {str(p.relative_to(root)): {"size": p.stat().st_size, "sha256": file_sha256(p)}
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != MARKER}


def verify_checkpoint(path: Path) -> str | None:
    """None when every file the marker lists has its recorded size and checksum, else what is wrong (naming
    the file). A marker from before manifests were kept (``ok``) is trusted."""
    try:
        record = json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return None
    for rel, want in (record.get("files") or {}).items():
        f = path / rel
        if not f.is_file():
            return f"{f} is missing"
        if f.stat().st_size != want["size"]:
            return f"{f} has {f.stat().st_size} bytes, {want['size']} were written"
        from selectrust.core.hashing import file_sha256

        if file_sha256(f) != want["sha256"]:
            return f"{f} does not match its checksum"
    return None


def step_of(path: Path) -> int:
    return int(path.name.split("_", 1)[1])


def complete_checkpoints(ckpt_root: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    if not ckpt_root.exists():
        return []
    found = [p for p in ckpt_root.glob("step_*") if p.is_dir() and (p / MARKER).exists()
             and p.name.split("_", 1)[1].isdigit()]
    return sorted(found, key=step_of)


# -- RNG ---------------------------------------------------------------------------------------
def rng_state() -> tuple[dict, dict]:
    import torch  # deferred: imports torch

    py = random.getstate()
    npst = np.random.get_state()
    meta = {"python": [py[0], list(py[1]), py[2]],
            "numpy": [npst[0], npst[1].tolist(), int(npst[2]), int(npst[3]), float(npst[4])]}
    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch_cuda_{i}"] = s
    return meta, tensors


def set_rng_state(meta: dict, tensors: dict) -> None:
    import torch  # deferred: imports torch

    py = meta["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = meta["numpy"]
    np.random.set_state((n[0], np.array(n[1], dtype=np.uint32), n[2], n[3], n[4]))
    torch.set_rng_state(tensors["torch_cpu"])
    cuda = [tensors[k] for k in sorted(k for k in tensors if k.startswith("torch_cuda_"))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)


class CheckpointManager:
    def __init__(self, run_dir: Path, accelerator, *, keep_last: int = 2, node_local: bool = False):
        self.root = checkpoints_dir(run_dir)
        self.acc = accelerator
        self.keep_last = keep_last
        # who writes the checkpoint's shared part (weights, optimizer, scheduler, trainer state), renames it and
        # marks it complete: the main process; with node-local run dirs, every node's local rank 0 in its own
        self.owner = accelerator.is_local_main_process if node_local else accelerator.is_main_process
        self.node_local = node_local

    @property
    def _deepspeed(self) -> bool:
        from .distributed import uses_deepspeed  # deferred: imports torch

        return uses_deepspeed(self.acc)

    # -- discovery ---------------------------------------------------------------------------
    def latest(self) -> Path | None:
        found = complete_checkpoints(self.root)
        return found[-1] if found else None

    def resolve_resume(self, resume: str) -> Path | None:
        """``auto`` -> newest complete checkpoint whose files verify (falling back past damaged ones with a
        warning) or None; ``none`` -> None; else a path that must be complete and verify."""
        if resume == "none":
            return None
        if resume == "auto":
            found = complete_checkpoints(self.root)
            for candidate in reversed(found):
                problem = verify_checkpoint(candidate)
                if problem is None:
                    return candidate
                print(f"[selectrust] warning: checkpoint {candidate} is damaged ({problem}); "
                      f"falling back to the previous complete checkpoint", flush=True)
            if found:
                raise RuntimeError(f"every complete checkpoint in {self.root} is damaged (see the warnings above); "
                                   f"move them aside or start over with trainer.overwrite=true")
            return None
        path = Path(resume).expanduser()
        if path.is_dir() and path.name == CHECKPOINTS:
            found = complete_checkpoints(path)
            path = found[-1] if found else path
        if not (path / MARKER).exists():
            raise FileNotFoundError(f"trainer.resume={resume!r}: {path} is not a complete checkpoint "
                                    f"(no {MARKER} marker); complete ones: "
                                    f"{[p.name for p in complete_checkpoints(path.parent)]}")
        problem = verify_checkpoint(path)
        if problem is not None:
            raise RuntimeError(f"trainer.resume={resume!r}: checkpoint {path} is damaged ({problem})")
        return path

    # -- save ----------------------------------------------------------------------------------
    def save(self, step: int, *, model, optimizer, scheduler, train_state: dict[str, Any]) -> Path:
        import torch  # deferred: imports torch
        from safetensors.torch import save_file  # deferred: imports safetensors

        acc = self.acc
        tmp = self.root / f".tmp-step_{step}"
        final = self.root / f"step_{step}"
        if self.owner:
            self.root.mkdir(parents=True, exist_ok=True)
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir()
        acc.wait_for_everyone()
        meta, tensors = rng_state()
        r = acc.process_index
        rngs = {r: (meta, tensors)}  # the RNG files this rank writes: its own
        if self.node_local:  # every node's copy holds every rank's RNG state, written by its owner
            from .distributed import all_gather_object

            everyone = dict(enumerate(all_gather_object(acc, (meta, tensors))))
            rngs = everyone if self.owner else {}
        with _writing(tmp):
            for rank, (m, t) in rngs.items():
                (tmp / f"rng_rank{rank}.json").write_text(json.dumps(m))
                save_file({k: v.contiguous() for k, v in t.items()}, str(tmp / f"rng_rank{rank}.safetensors"))
            if self._deepspeed:
                acc.save_state(str(tmp / "accelerate_state"))
            elif self.owner:
                self._save_weights(acc.unwrap_model(model), tmp)
                _test_pause("files", step)
                torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
            if self.owner:
                (tmp / "scheduler.json").write_text(json.dumps(scheduler.state_dict()))
                (tmp / "trainer_state.json").write_text(json.dumps({"step": step, **train_state}, indent=2))
        acc.wait_for_everyone()
        if self.owner:
            fsync_tree(tmp)
            _test_pause("before_rename", step)
            if final.exists():  # an incomplete leftover of the same step
                shutil.rmtree(final)
            os.replace(tmp, final)
            _fsync_file(self.root)
            _test_pause("before_marker", step)
            (final / MARKER).write_text(json.dumps({"step": step, "files": file_manifest(final)}, indent=1) + "\n")
            _fsync_file(final / MARKER)
            _fsync_file(final)
            self._prune()
        acc.wait_for_everyone()
        return final

    @staticmethod
    def _save_weights(model, out: Path) -> None:
        from safetensors.torch import save_file  # deferred: imports safetensors

        if hasattr(model, "peft_config"):
            from selectrust.model import save_policy

            save_policy(model, out / "adapter")
        else:
            state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
            save_file(state, str(out / "model.safetensors"))

    def _prune(self) -> None:
        found = complete_checkpoints(self.root)
        for old in found[:-self.keep_last]:
            shutil.rmtree(old, ignore_errors=True)
        for stale in self.root.glob(".tmp-step_*"):
            shutil.rmtree(stale, ignore_errors=True)

    # -- load ----------------------------------------------------------------------------------
    def load(self, path: Path, *, model, optimizer, scheduler) -> dict[str, Any]:
        import torch  # deferred: imports torch
        from safetensors.torch import load_file  # deferred: imports safetensors

        acc = self.acc
        if self._deepspeed:
            acc.load_state(str(path / "accelerate_state"))
        else:
            self._load_weights(acc.unwrap_model(model), path)
            optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True, map_location="cpu"))
        scheduler.load_state_dict(json.loads((path / "scheduler.json").read_text()))
        r = acc.process_index
        rng_json = path / f"rng_rank{r}.json"
        if rng_json.exists():  # absent when resuming on more ranks than saved: seeds stay as set
            set_rng_state(json.loads(rng_json.read_text()), load_file(str(path / f"rng_rank{r}.safetensors")))
        return json.loads((path / "trainer_state.json").read_text())

    @staticmethod
    def _load_weights(model, path: Path) -> None:
        from safetensors.torch import load_file  # deferred: imports safetensors

        if hasattr(model, "peft_config"):
            from peft import set_peft_model_state_dict

            adapter_dir = path / "adapter"
            files = list(adapter_dir.rglob("adapter_model.safetensors"))
            if not files:
                raise FileNotFoundError(f"{adapter_dir}: no adapter_model.safetensors")
            state = load_file(str(files[0]))
            result = set_peft_model_state_dict(model, state)
            unexpected = getattr(result, "unexpected_keys", [])
            if unexpected:
                raise RuntimeError(f"{files[0]}: unexpected adapter keys {unexpected[:5]}")
        else:
            state = load_file(str(path / "model.safetensors"))
            missing, unexpected = model.load_state_dict(state, strict=False)
            if unexpected or [k for k in missing if "rotary" not in k]:
                raise RuntimeError(f"{path}/model.safetensors: missing {missing[:5]}, unexpected {unexpected[:5]}")
