"""LoRA weight sync from the trainer to a generation server, and the sync probe that proves it worked.

It sits next to the evaluation it serves: every trainer's epoch-end evaluation through a server that takes the
adapter (``trainer/evaluation/__init__.py``) pushes the current adapter with it; GRPO's rollouts do too
(``trainer/rl/rollout_sync.py``, the collective hook before each rollout batch).

API (call from the trainer loop; see the bottom of this docstring)
---
    save_adapter_atomically(peft_model, root, version) -> (path, sha256)
    sync = AdapterSync(backend, root, every_k_steps=1, keep_last=2, tokenizer=tok,
                       probe_text=..., probe_threshold=0.1)
    metrics = sync.maybe_sync(model, step)    # {} or {adapter_version, adapter_checksum, probe_...}
    sync_probe(backend, model, tokenizer, probe_text, adapter, threshold) -> dict   # or StaleWeightsError

Trainer loop::

    sync = AdapterSync(backend, run_dir / "adapters", every_k_steps=cfg.k, tokenizer=tok,
                       main_process=acc.is_main_process)
    for step in range(start_step, max_steps):
        m = sync.maybe_sync(unwrapped_peft_model, step, barrier=acc.wait_for_everyone)  # before rollouts:
        rollouts = backend.generate(requests)    # first call always syncs; then every k steps
        ... optimizer step ...
        log({**train_metrics, **m, **sync.current()})   # version + checksum on every metrics line

``maybe_sync`` raises :class:`StaleWeightsError` (metrics on ``.metrics``) and the backend raises
``AdapterLoadError`` / ``ServerUnreachableError``: checkpoint and stop on any of them.

Why the probe: across TRL, verl and OpenRLHF the most reported RL failure is a rollout engine that
silently generates with stale or base weights. After every sync we ask the server for the prompt
log-probs of a fixed probe sequence under the new adapter and compare them with the trainer's own
(eval-mode, no-grad) forward pass. A mean |Δ log p| above ``threshold`` raises
:class:`StaleWeightsError`. The probe can only see a stale adapter when the weights moved more than the
numerical noise between the two engines; ``probe_trainer_shift`` (how far the trainer's probe log-probs
moved since the previous sync) is logged so one can tell whether a pass was informative.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from eval_hooks.backends.vllm_server import CHECKSUM_FILE  # stdlib-only module: cheap to import

DEFAULT_PROBE_TEXT = (
    "The quick brown fox jumps over the lazy dog. Question: what is 12 + 30? Answer: 42.\n"
    "Evidence can be wrong; check it before you trust it."
)



class StaleWeightsError(RuntimeError):
    """The generation server's log-probs disagree with the trainer's for the same adapter.
    ``metrics`` holds the probe differences (always logged before raising)."""

    def __init__(self, message: str, metrics: dict):
        super().__init__(message)
        self.metrics = metrics


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def adapter_checksum(directory: str | Path) -> str:
    """sha256 over the adapter's files (sorted by name; name, NUL, bytes for each), excluding the
    checksum file itself. Covers the weights and the config (rank, alpha, target modules)."""
    h = hashlib.sha256()
    for p in sorted(Path(directory).iterdir()):
        if p.is_file() and p.name != CHECKSUM_FILE:
            h.update(p.name.encode() + b"\0")
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()


def save_adapter_atomically(peft_model, root: str | Path, version: str | int) -> tuple[str, str]:
    """Save ``peft_model``'s adapter as safetensors to ``<root>/adapter-<version>`` atomically.

    Written to a temporary sibling directory, every file fsynced, then renamed into place, so a reader
    (the server) never sees a partial adapter. An existing directory of the same version is replaced.
    Returns ``(path, sha256)``; the checksum is also written to ``CHECKSUM.sha256`` inside.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"adapter-{version}"
    tmp = Path(tempfile.mkdtemp(prefix=f".adapter-{version}-", dir=root))
    try:
        from trainer.model.policy import save_policy

        save_policy(peft_model, tmp)  # the trained adapter only (not a frozen reference copy)
        if not (tmp / "adapter_model.safetensors").is_file():
            raise RuntimeError(f"save_adapter_atomically: {type(peft_model).__name__}.save_pretrained wrote no "
                               f"adapter_model.safetensors in {tmp}; is it a peft LoRA model?")
        checksum = adapter_checksum(tmp)
        (tmp / CHECKSUM_FILE).write_text(checksum + "\n")
        for p in tmp.iterdir():
            if p.is_file():
                with open(p, "rb") as f:
                    os.fsync(f.fileno())
        _fsync_dir(tmp)
        if target.exists():
            trash = Path(tempfile.mkdtemp(prefix=f".trash-{version}-", dir=root))
            os.replace(target, trash / "old")
            os.replace(tmp, target)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(tmp, target)
        _fsync_dir(root)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return str(target), checksum


def trainer_prompt_logprobs(model, token_ids: list[int]) -> list[float]:
    """``[log p(x_t | x_<t) for t in 1..L-1]`` under ``model`` in eval mode (no dropout), no grad."""
    import torch

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            device = next(model.parameters()).device
            logits = model(input_ids=torch.tensor([token_ids], device=device)).logits[0].float()
        logp = torch.log_softmax(logits, dim=-1)
        tgt = torch.tensor(token_ids[1:], device=logp.device)
        return logp[:-1].gather(-1, tgt.unsqueeze(-1)).squeeze(-1).cpu().tolist()
    finally:
        if was_training:
            model.train()


def sync_probe(backend, model, tokenizer, probe_text: str, adapter: str | None, threshold: float,
               *, trainer_logprobs: list[float] | None = None) -> dict:
    """Compare server and trainer log-probs of ``probe_text`` under ``adapter`` (a served name; None =
    the backend's current adapter). Returns ``{probe_mean_abs_dlogp, probe_max_abs_dlogp,
    probe_tokens}``; raises :class:`StaleWeightsError` (with those metrics) if the mean exceeds
    ``threshold``."""
    ids = list(tokenizer(probe_text, add_special_tokens=False)["input_ids"])
    if len(ids) < 2:
        raise ValueError(f"sync_probe: probe_text must be at least 2 tokens, got {len(ids)}")
    server = backend.prompt_logprobs(ids, adapter=adapter)
    mine = trainer_logprobs if trainer_logprobs is not None else trainer_prompt_logprobs(model, ids)
    if len(server) != len(mine):
        raise ValueError(f"sync_probe: server returned {len(server)} log-probs for {len(ids) - 1} probe positions")
    diffs = [abs(a - b) for a, b in zip(server, mine)]
    metrics = {"probe_mean_abs_dlogp": sum(diffs) / len(diffs), "probe_max_abs_dlogp": max(diffs),
               "probe_tokens": len(diffs)}
    if metrics["probe_mean_abs_dlogp"] > threshold:
        name = adapter or getattr(backend, "current_adapter", None) or "<base>"
        raise StaleWeightsError(
            f"sync probe failed: the generation server is generating with stale or wrong weights. Under adapter "
            f"{name!r} its log-probs of the probe sequence differ from the trainer's by mean |Δlogp| = "
            f"{metrics['probe_mean_abs_dlogp']:.4g} (max {metrics['probe_max_abs_dlogp']:.4g}) over "
            f"{len(diffs)} tokens, above the threshold {threshold:g}. Rollouts would come from a different "
            f"policy than the one being trained. Check that the server loaded the new adapter (not a cached "
            f"one under the same name), that base model and dtype match, and that LoRA rank <= --max-lora-rank.",
            metrics)
    return metrics


class AdapterSync:
    """Every ``every_k_steps`` optimizer steps: save the adapter, load it on the server under a new
    version, run the probe. Keeps the newest ``keep_last`` adapter directories on disk."""

    def __init__(self, backend, root: str | Path, every_k_steps: int = 1, keep_last: int = 2, *, tokenizer=None,
                 probe_text: str = DEFAULT_PROBE_TEXT, probe_threshold: float = 0.1, probe: bool = True,
                 main_process: bool = True):
        if every_k_steps < 1:
            raise ValueError(f"AdapterSync.every_k_steps must be >= 1, got {every_k_steps}")
        if keep_last < 1:
            raise ValueError(f"AdapterSync.keep_last must be >= 1, got {keep_last}")
        if probe and tokenizer is None:
            raise ValueError("AdapterSync: the sync probe needs the trainer's tokenizer (tokenizer=), "
                             "or pass probe=False")
        self.backend = backend
        self.root = Path(root)
        self.every_k_steps = every_k_steps
        self.keep_last = keep_last
        self.tokenizer = tokenizer
        self.probe_text = probe_text
        self.probe_threshold = probe_threshold
        self.probe = probe
        self.main_process = main_process
        self.version: str | None = None
        self.checksum: str | None = None
        self._saved: list[Path] = []
        self._last_probe: list[float] | None = None

    def maybe_sync(self, model, step: int, *, barrier=None) -> dict:
        """Sync if nothing was synced yet (so the first rollout never uses base or old weights, e.g. after
        resume) or ``step % every_k_steps == 0``; returns the sync metrics, or ``{}`` otherwise."""
        if self.version is not None and step % self.every_k_steps != 0:
            return {}
        return self.sync(model, step, barrier=barrier)

    def sync(self, model, step: int, *, barrier=None) -> dict:
        """Save, load on the server, probe. Several processes: pass ``barrier`` (e.g.
        ``accelerator.wait_for_everyone``) and ``main_process=`` at construction; the main process syncs,
        the others wait for it and then route their requests to the adapter it loaded."""
        version = f"s{step}"
        if not self.main_process:
            if barrier is None:
                raise ValueError("AdapterSync(main_process=False).sync needs barrier= (wait for the main process)")
            barrier()
            path = str(self.root / f"adapter-{version}")
            self.backend.use_adapter(path, version)
            self.version = version
            self.checksum = (Path(path) / CHECKSUM_FILE).read_text().strip()
            return {"adapter_version": version, "adapter_checksum": self.checksum, "adapter_path": path}
        try:
            return self._sync_main(model, step, version)
        finally:
            if barrier is not None:
                barrier()

    def _sync_main(self, model, step: int, version: str) -> dict:
        path, checksum = save_adapter_atomically(model, self.root, version)
        self.backend.load_adapter(path, version)
        self.version, self.checksum = version, checksum
        metrics: dict = {"adapter_version": version, "adapter_checksum": checksum, "adapter_path": path}
        self._saved = [p for p in self._saved if p != Path(path)] + [Path(path)]
        while len(self._saved) > self.keep_last:
            shutil.rmtree(self._saved.pop(0), ignore_errors=True)
        if self.probe:
            ids = list(self.tokenizer(self.probe_text, add_special_tokens=False)["input_ids"])
            mine = trainer_prompt_logprobs(model, ids)
            if self._last_probe is not None:
                metrics["probe_trainer_shift"] = sum(abs(a - b) for a, b in zip(mine, self._last_probe)) / len(mine)
            self._last_probe = mine
            try:
                metrics.update(sync_probe(self.backend, model, self.tokenizer, self.probe_text, None,
                                          self.probe_threshold, trainer_logprobs=mine))
            except StaleWeightsError as e:
                e.metrics = {**metrics, **e.metrics}
                raise
        return metrics

    def current(self) -> dict:
        """Version and checksum in use, for every ``metrics.jsonl`` line."""
        return {"adapter_version": self.version, "adapter_checksum": self.checksum} if self.version else {}


def adapter_root(ctx) -> Path:
    """Shared directory the synced adapters are written to (``generation.adapter_dir`` or ``<run_dir>/adapters``)."""
    return Path(ctx.cfg.generation.adapter_dir or Path(ctx.run_dir) / "adapters")


def lazy_adapter_sync(make_backend, root: str | Path, **kwargs):
    """A getter for one :class:`AdapterSync` over ``make_backend()``, built on the first call (the backend it
    pushes to may not exist before the first rollout or evaluation) and the same object after that."""
    built: list[AdapterSync] = []

    def get() -> AdapterSync:
        if not built:
            built.append(AdapterSync(make_backend(), root, **kwargs))
        return built[0]

    return get
