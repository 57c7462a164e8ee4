"""Mixed precision where the hardware gains from it: ``auto`` becomes ``bf16`` on a bf16-capable CUDA GPU or on a CPU
with AMX-BF16, else ``no``. Used for training (``trainer.mixed_precision``) and for in-process generation
(``generation.mixed_precision`` of the HF backend). Torch is imported only when ``auto`` is resolved.

A CPU with AVX512-BF16 but no AMX computes bf16 natively, yet torch's bf16 GEMMs ran at about half fp32's speed
there (0.52x, the median over SmolLM2-135M's linear shapes on 2 cores; ``bench/bench_bf16_gemm.py`` prints the ratio
on any machine), and one held-out evaluation of the real demo took 83 s under bf16 autocast against 59 s in fp32.
With AMX the same GEMMs ran about 2.3x faster in bf16. So ``auto`` asks for AMX; ``bf16`` stays available on any CPU that
has either flag."""

from __future__ import annotations

from pathlib import Path

#: The one table of precision names: each name a config takes (``model.dtype``, with its short forms; a
#: ``mixed_precision`` of ``bf16`` / ``fp16``) -> the torch dtype's attribute name (so importing this is torch-free).
DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16"}


def torch_dtype(name: str):
    """The torch dtype called ``name`` in :data:`DTYPES` (``KeyError`` for another name)."""
    import torch  # deferred: imports torch; selectrust.model is torch-free to import

    return getattr(torch, DTYPES[name])


def autocast_dtype(mixed_precision: str):
    """The autocast dtype of a resolved mixed-precision setting (:func:`resolve_mixed_precision`): ``bf16`` /
    ``fp16``'s dtype, None for ``no`` (full precision)."""
    return torch_dtype(mixed_precision) if mixed_precision in DTYPES else None


def cpu_supports_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU computes bf16 natively: the ``amx_bf16`` or ``avx512_bf16`` flag in ``/proc/cpuinfo``
    (``cpuinfo``: that file's text, for tests). Without /proc (not Linux): False."""
    return bool(_cpu_flags(cpuinfo) & {"amx_bf16", "avx512_bf16"})


def _cpu_flags(cpuinfo: str | None) -> set[str]:
    """The CPU's flags in ``/proc/cpuinfo`` (or in ``cpuinfo``, that file's text); empty without /proc."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return flags


def cpu_has_amx_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU has AMX-BF16 (the ``amx_bf16`` flag), where bf16 GEMMs are faster than fp32 (the module
    docstring); ``cpuinfo`` as for :func:`cpu_supports_bf16`."""
    return "amx_bf16" in _cpu_flags(cpuinfo)


def resolve_mixed_precision(value: str, *, cpu: bool = False, cpuinfo: str | None = None, quiet: bool = False) -> str:
    """A mixed-precision setting (``trainer.mixed_precision``, the HF backend's ``mixed_precision``) as accelerate
    and autocast take it: ``auto`` becomes ``bf16`` on a bf16-capable CUDA GPU (unless ``cpu``) or on a CPU with
    AMX-BF16 (:func:`cpu_has_amx_bf16`), else ``no`` with a message (none with ``quiet``); other values pass
    through."""
    if value != "auto":
        return value
    import torch  # deferred: imports torch

    if not cpu and torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "no"
    if cpu_has_amx_bf16(cpuinfo):
        return "bf16"
    if quiet:
        return "no"
    why = "its bf16 GEMMs are slower than fp32 without AMX" if cpu_supports_bf16(cpuinfo) else "no bf16 support"
    print(f"[selectrust] mixed_precision=auto: this CPU has no AMX-BF16 ({why}), running in fp32", flush=True)
    return "no"
