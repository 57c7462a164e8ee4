"""LoRA adapters on a vLLM server: the rules the client (``vllm_server.py``) applies before it loads one.

Protocol: ``POST /v1/load_lora_adapter {lora_name, lora_path}`` (the server needs ``--enable-lora`` and
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``); requests name the adapter in ``model``; old ones go through ``POST
/v1/unload_lora_adapter``. Each version gets a new name (``<prefix>-<version>-<sha256[:12]>`` from the adapter's
checksum file, :mod:`selectrust.generation.backends.adapter_checksum`, else a per-client nonce), because a server may cache
an adapter by name and keep serving stale weights under a reused one. The client keeps which adapters it loaded
and routes requests to them; this module holds what needs no client state.

Fit check: with ``server_settings`` (what ``launch/vllm_launcher.py`` writes beside its log: ``max_lora_rank``,
``lora_target_modules``; :func:`read_server_settings`) an adapter whose rank is above the server's
``--max-lora-rank`` or whose target modules the server does not apply LoRA to is refused before it is loaded
(:func:`check_adapter_fits`, :class:`AdapterLoadError`): vLLM would load it and silently ignore the weights of the
modules outside ``--lora-target-modules``.

API (standard library only)
---
    read_server_settings("runs/x/vllm_server.log") -> dict | None   # runs/x/vllm_server.json, if any
    check_adapter_fits(adapter_dir, server_settings, base_url)       # None, or raises AdapterLoadError
"""

from __future__ import annotations

import json
from pathlib import Path

from .transport import ServerError


class AdapterLoadError(ServerError):
    """The server did not load an adapter. Never fall back to the base model on this error."""


def read_server_settings(server_log: str | None) -> dict | None:
    """The settings ``launch/vllm_launcher.py`` wrote beside its log (``<log without suffix>.json``:
    ``max_lora_rank``, ``lora_target_modules``, ``dtype``, ...), or None when there is no such file."""
    if not server_log:
        return None
    path = Path(server_log).with_suffix(".json")
    try:
        settings = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return settings if isinstance(settings, dict) else None


def check_adapter_fits(path: str, server_settings: dict, base_url: str) -> None:
    """Raise :class:`AdapterLoadError` if ``server_settings`` say the server at ``base_url`` cannot serve the adapter
    at ``path`` whole: its rank (``r`` of ``adapter_config.json``) is above ``max_lora_rank`` or it has LoRA weights
    on modules outside ``lora_target_modules`` (vLLM would load it and ignore those weights). Nothing is checked
    when ``server_settings`` is empty or the adapter has no config (a missing config is the server's error)."""
    config = Path(path) / "adapter_config.json"
    if not server_settings or not config.is_file():
        return
    cfg = json.loads(config.read_text())
    targets = cfg.get("target_modules") or []
    targets = [targets] if isinstance(targets, str) else list(targets)
    covered = server_settings.get("lora_target_modules")
    missing = sorted(set(targets) - set(covered)) if covered is not None else []
    rank, max_rank = int(cfg.get("r", 0)), server_settings.get("max_lora_rank")
    problems = ([f"LoRA on {missing}, which the server does not apply LoRA to (its --lora-target-modules "
                 f"{sorted(covered)}): vLLM would load the adapter and silently ignore those weights"]
                if missing else [])
    if max_rank is not None and rank > int(max_rank):
        problems.append(f"rank {rank}, above the server's --max-lora-rank {max_rank}")
    if problems:
        raise AdapterLoadError(f"adapter {path} cannot be served by {base_url}: it has "
                               f"{'; and '.join(problems)}. Restart the server with the policy's LoRA "
                               f"(launch/vllm_launcher.py --lora-rank {rank} --lora-target-modules "
                               f"{' '.join(sorted(targets))}, or --like-adapter {path}).")
