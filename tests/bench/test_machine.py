"""``processor``: the CPU a benchmark's figures were measured on, read from cpuinfo."""

from __future__ import annotations

from pathlib import Path

from bench.machine import processor

_SAPPHIRE = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Processor
stepping\t: 8
flags\t\t: fpu sse2 avx2 avx512f avx512bw amx_bf16 amx_tile

processor\t: 1
model name\t: a second processor, never read
"""


def test_the_cpu_is_named_by_model_identity_and_wide_vector_units(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(_SAPPHIRE)
    assert processor(cpuinfo) == (
        "Intel(R) Xeon(R) Processor; family 6, model 143, stepping 8; AVX-512 AMX"
    )


def test_two_chips_behind_one_generic_name_are_told_apart(tmp_path: Path) -> None:
    older = tmp_path / "older"
    older.write_text(
        _SAPPHIRE.replace("model\t\t: 143", "model\t\t: 85")
        .replace("stepping\t: 8", "stepping\t: 7")
        .replace(" amx_bf16 amx_tile", "")
    )
    newer = tmp_path / "newer"
    newer.write_text(_SAPPHIRE)
    assert processor(older) == "Intel(R) Xeon(R) Processor; family 6, model 85, stepping 7; AVX-512"
    assert processor(older) != processor(newer)


def test_a_cpu_without_wide_units_or_fields_is_still_described(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.write_text("processor\t: 0\nmodel name\t: ARMv8 Processor\nflags\t: fp asimd\n")
    assert processor(bare) == "ARMv8 Processor"


def test_an_unreadable_cpuinfo_gives_unknown(tmp_path: Path) -> None:
    assert processor(tmp_path / "missing") == "unknown"
    assert processor(Path("/proc/cpuinfo")) != "unknown"  # this Linux machine's
