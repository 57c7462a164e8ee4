"""Mixed precision where the hardware has it: ``auto`` becomes ``bf16`` on a bf16-capable CUDA GPU or CPU (AMX-BF16,
AVX512-BF16), else ``no``. Used for training (``trainer.mixed_precision``) and for in-process generation
(``generation.mixed_precision`` of the HF backend). Torch is imported only when ``auto`` is resolved."""

from __future__ import annotations

from pathlib import Path


def cpu_supports_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU computes bf16 natively: the ``amx_bf16`` or ``avx512_bf16`` flag in ``/proc/cpuinfo``
    (``cpuinfo``: that file's text, for tests). Without /proc (not Linux): False."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return bool(flags & {"amx_bf16", "avx512_bf16"})


def resolve_mixed_precision(value: str, *, cpu: bool = False, cpuinfo: str | None = None) -> str:
    """A mixed-precision setting (``trainer.mixed_precision``, the HF backend's ``mixed_precision``) as accelerate
    and autocast take it: ``auto`` becomes ``bf16`` on a bf16-capable CUDA GPU
    (unless ``cpu``) or CPU (``cpu_supports_bf16``), else ``no`` with a message; other values pass through."""
    if value != "auto":
        return value
    import torch

    if not cpu and torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "no"
    if cpu_supports_bf16(cpuinfo):
        return "bf16"
    print("[selectrust] trainer.mixed_precision=auto: this CPU has no AMX-BF16 / AVX512-BF16, training in fp32",
          flush=True)
    return "no"
