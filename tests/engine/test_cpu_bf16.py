"""engines/cpu_bf16.py: whether a CPU has bf16 units, read from /proc/cpuinfo, and the warning for a bf16 model on one
that has none (this project's machines have been of both kinds: an Intel with AMX, an AMD EPYC with AVX2 only)."""

from __future__ import annotations

import logging

import pytest

from engines import cpu_bf16
from engines.cpu_bf16 import emulated_bf16_warning, native_bf16

AMD_AVX2 = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 fma\n\n" \
           "processor\t: 1\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 fma\n"
INTEL_AMX = "processor\t: 0\nflags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
ONLY_AVX512 = "processor\t: 0\nflags\t\t: avx2 avx512f avx512bw avx512_vnni\n"
ONE_CORE_WITHOUT = "processor\t: 0\nflags\t\t: avx512_bf16\n\nprocessor\t: 1\nflags\t\t: avx2\n"
GRAVITON3 = "processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd sve bf16 i8mm\n"
GRAVITON2 = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull\n"


@pytest.mark.parametrize(("cpuinfo", "machine", "native"), [
    (AMD_AVX2, "x86_64", False),
    (INTEL_AMX, "x86_64", True),
    (ONLY_AVX512, "x86_64", False),  # AVX512 without its bf16 extension
    (ONE_CORE_WITHOUT, "x86_64", False),  # every core must have it
    (GRAVITON3, "aarch64", True),
    (GRAVITON2, "aarch64", False),
    (INTEL_AMX, "riscv64", None),  # another architecture: cannot tell
    ("", "x86_64", None),  # no flags line: cannot tell
    ("flags : avx512_bf16_not_this\n", "x86_64", False),  # whole words only
])
def test_native_bf16_from_cpuinfo(cpuinfo, machine, native) -> None:
    assert native_bf16(cpuinfo, machine) is native


@pytest.mark.parametrize(("dtype", "native", "warns"), [
    ("bfloat16", False, True), ("bfloat16", True, False), ("bfloat16", None, False), ("float32", False, False)])
def test_the_warning_names_the_setting_and_the_fix_only_when_bf16_would_be_emulated(dtype, native, warns) -> None:
    message = emulated_bf16_warning(dtype, "the embedded engine (engine.dtype)", native)
    assert (message is not None) is warns
    if warns:
        assert "engine.dtype" in message and "float32" in message and "avx512_bf16" in message


def test_the_engine_warns_at_construction_on_a_cpu_without_bf16(monkeypatch, tmp_path, caplog) -> None:
    from engines.embedded import EmbeddedEngine

    fake = tmp_path / "cpuinfo"
    fake.write_text(AMD_AVX2)
    monkeypatch.setattr(cpu_bf16, "CPUINFO", fake)
    monkeypatch.setattr(cpu_bf16.platform, "machine", lambda: "x86_64")
    with caplog.at_level(logging.WARNING, logger="harnessrl.engines"):
        EmbeddedEngine("tiny", dtype="float32", log_path=tmp_path / "a.log")
        assert not caplog.records
        EmbeddedEngine("tiny", dtype="bfloat16", log_path=tmp_path / "b.log")
    assert [r.getMessage().split(" runs in")[0] for r in caplog.records] == ["the embedded engine (engine.dtype)"]
