"""Whether this CPU computes bfloat16 natively, and the warning for a bf16 model on one that does not.

On a CPU with bf16 units (x86 AVX512-BF16 or AMX, the `bf16` feature of Armv8.6) a bfloat16 model's matrix products
run about 2-4x faster than in float32; on one without (most AVX2 machines: consumer Intel, AMD before Zen 4) torch
emulates them and the same model runs many times slower than in float32 (benchmarks/make_train.md, "bfloat16").
"""

from __future__ import annotations

import logging
import platform
from pathlib import Path

log = logging.getLogger("harnessrl.engines")

X86_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
"""/proc/cpuinfo `flags` that mean native bf16 products on x86."""
ARM_BF16_FEATURE = "bf16"
"""/proc/cpuinfo `Features` entry that means native bf16 products on Arm."""
CPUINFO = Path("/proc/cpuinfo")


def native_bf16(cpuinfo: str, machine: str) -> bool | None:
    """From /proc/cpuinfo's text and `platform.machine()`: True or False where the CPU says, None where it cannot be
    told (no such file, another architecture)."""
    machine = machine.lower()
    key, wanted = (("flags", X86_BF16_FLAGS) if machine in ("x86_64", "amd64", "i686")
                   else ("features", {ARM_BF16_FEATURE}) if machine in ("aarch64", "arm64") else ("", set()))
    if not key:
        return None
    lists = [line.partition(":")[2].split() for line in cpuinfo.splitlines()
             if line.partition(":")[0].strip().lower() == key]
    if not lists:
        return None
    return all(wanted & set(entries) for entries in lists)


def this_cpu_native_bf16() -> bool | None:
    """`native_bf16` of the machine this runs on (None where /proc/cpuinfo cannot be read, e.g. macOS)."""
    try:
        text = CPUINFO.read_text(errors="replace")
    except OSError:
        return None
    return native_bf16(text, platform.machine())


def emulated_bf16_warning(dtype: str, where: str, native: bool | None) -> str | None:
    """The warning for `dtype` on a CPU whose native bf16 support is `native`, or None when there is nothing to say."""
    if dtype != "bfloat16" or native is not False:
        return None
    return (f"{where} runs in bfloat16 on a CPU without bf16 units (/proc/cpuinfo has no "
            f"{' / '.join(sorted(X86_BF16_FLAGS))} on x86, no {ARM_BF16_FEATURE} on Arm): torch emulates its matrix "
            f"products, many times slower than float32. Set {where}'s dtype to float32 on this machine")


def warn_if_emulated_bf16(dtype: str, where: str) -> None:
    """Log `emulated_bf16_warning` for this machine's CPU."""
    message = emulated_bf16_warning(dtype, where, this_cpu_native_bf16() if dtype == "bfloat16" else None)
    if message is not None:
        log.warning(message)
