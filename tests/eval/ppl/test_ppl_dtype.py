"""--dtype auto: bf16 only where the CPU has bf16 matmul units, detected from the CPU, never assumed."""

from __future__ import annotations

from pathlib import Path

import pytest

from ropectl.runtime.cpu import choose_from_flags, cpu_dtype, cpu_flags, probe_cached

AVX2_EPYC = "processor\t: 0\nflags\t\t: fpu vme sse sse2 ssse3 sse4_1 sse4_2 avx f16c avx2 fma bmi2\n"
SAPPHIRE = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 avx512f avx512bw avx512_bf16 amx_bf16 amx_tile amx_int8\n"
ZEN4 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 avx512f avx512_bf16 avx512_vnni\n"
GRAVITON3 = "processor\t: 0\nFeatures\t: fp asimd aes sha2 crc32 atomics sve bf16 i8mm\n"


@pytest.mark.parametrize(("text", "want"), [(SAPPHIRE, "bf16"), (ZEN4, "bf16"), (GRAVITON3, "bf16"),
                                            (AVX2_EPYC, "fp32")])
def test_flags_decide(text: str, want: str) -> None:
    dtype, why = cpu_dtype(text)
    assert dtype == want and why.startswith("auto: ")
    if want == "fp32":  # negative control: AVX-512 without its BF16 extension is not enough either
        assert choose_from_flags({"avx2", "avx512f", "avx512bw"})[0] == "fp32"


def test_this_machine_matches_its_flags() -> None:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else None
    if not text or cpu_flags(text) is None:
        pytest.skip("no readable CPU flags here")
    flags = cpu_flags(text)
    want = "bf16" if {"avx512_bf16", "amx_bf16"} & flags else "fp32"
    assert cpu_dtype()[0] == want  # the project's CI machine is AVX2-only: fp32


def test_probe_is_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ropectl.runtime.cpu as cpu

    calls = []
    monkeypatch.setattr(cpu, "probe", lambda: calls.append(1) or ("fp32", "auto: probe"))
    first = probe_cached(tmp_path)
    second = probe_cached(tmp_path)
    assert first == ("fp32", "auto: probe") and second == ("fp32", "auto: probe (cached)") and len(calls) == 1


def test_probe_measures_both_dtypes() -> None:
    from ropectl.runtime.cpu import probe

    dtype, why = probe()
    assert dtype in ("fp32", "bf16") and "GFLOP/s" in why


def test_auto_on_gpu_and_explicit_choices() -> None:
    from ropectl.runtime.model import resolve_dtype_choice

    assert resolve_dtype_choice("auto", "cuda:0") == ("bf16", "auto: CUDA GPU")
    assert resolve_dtype_choice("fp16", "cpu") == ("fp16", "asked for")


def test_auto_choice_is_stated_in_the_run_metadata(tmp_path: Path, tiny_model: Path, tiny_corpus: Path) -> None:
    """What auto ran and why, in summary.json and results.json: the CPU's flags decide it, independently read."""
    import json

    from ropectl.eval.tasks.ppl import build_spec, run_eval

    spec = build_spec(model=str(tiny_model), dataset=str(tiny_corpus), methods=["none"], lengths="64", docs=1,
                      dtype="auto", device="cpu", out=tmp_path / "run", cache_dir=tmp_path / "cache")
    run_eval(spec)
    want = cpu_dtype()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())["meta"]
    results = json.loads((tmp_path / "run" / "results.json").read_text())["meta"]
    for meta in (summary, results):
        assert (meta["dtype"], meta["dtype_choice"]) == want
