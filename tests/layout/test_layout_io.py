"""Round trips are bit-exact; untouched bytes, metadata, index and side files are preserved; nothing else moves."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from ropectl.io.safetensors_header import read_header
from ropectl.layout.convert import METADATA_KEY, ConvertSpec, convert_layout
from ropectl.layout.detect import HALF_SPLIT, INTERLEAVED, known_layout
from tests.helpers.checkpoints import tiny_gemma3, tiny_llama, tiny_neox


def _cast(folder: Path, dtype: torch.dtype) -> Path:
    gen = torch.Generator().manual_seed(3)
    state = {k: (torch.randn(v.shape, generator=gen) if k.endswith(".bias") else v).to(dtype)  # HF zero-inits biases
             for k, v in load_file(folder / "model.safetensors").items()}
    save_file(state, folder / "model.safetensors", metadata={"format": "pt", "origin": "test"})
    cfg = json.loads((folder / "config.json").read_text())
    cfg["dtype"] = str(dtype).removeprefix("torch.")
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def _raw(folder: Path) -> dict[str, bytes]:
    sf = read_header(folder / "model.safetensors")
    data = (folder / "model.safetensors").read_bytes()[sf.data_start:]
    return {n: data[i.begin:i.end] for n, i in sf.tensors.items()}


@pytest.fixture(scope="module")
def llama_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tiny_llama(tmp_path_factory.mktemp("io") / "llama")
    (src / "tokenizer.json").write_text('{"version": "1.0"}')
    (src / "training_args.bin").write_bytes(b"not weights")
    (src / "original").mkdir()
    return src


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_round_trip_is_bit_identical(tmp_path: Path, dtype: torch.dtype) -> None:
    src = _cast(tiny_llama(tmp_path / "src"), dtype)
    mid = tmp_path / "mid"
    back = tmp_path / "back"
    convert_layout(ConvertSpec(model=str(src), to=INTERLEAVED, output=mid))
    convert_layout(ConvertSpec(model=str(mid), to=HALF_SPLIT, output=back))
    before, middle, after = _raw(src), _raw(mid), _raw(back)
    assert before == after
    moved = {n for n in before if before[n] != middle[n]}
    assert moved == {n for n in before if n.endswith(("q_proj.weight", "k_proj.weight", "q_proj.bias", "k_proj.bias"))}
    with safe_open(back / "model.safetensors", "pt") as f:
        assert f.metadata() == {"format": "pt", "origin": "test", METADATA_KEY: HALF_SPLIT}
        assert f.get_tensor("model.layers.0.self_attn.q_proj.weight").dtype == dtype


def test_output_records_layout_and_copies_side_files(tmp_path: Path, llama_src: Path) -> None:
    out = tmp_path / "out"
    result = convert_layout(ConvertSpec(model=str(llama_src), to=INTERLEAVED, output=out))
    cfg = json.loads((out / "config.json").read_text())
    src_cfg = json.loads((llama_src / "config.json").read_text())
    assert cfg["ropectl"]["layout"] == INTERLEAVED
    assert {k: v for k, v in cfg.items() if k != "ropectl"} == src_cfg
    assert known_layout(cfg)[0] == INTERLEAVED
    assert (out / "tokenizer.json").read_bytes() == (llama_src / "tokenizer.json").read_bytes()
    assert (out / "generation_config.json").is_file()
    assert sorted(result.skipped) == ["original/", "training_args.bin"]
    assert not (out / "training_args.bin").exists()
    assert any("silently compute garbage" in w for w in result.warnings)
    assert any("llama.cpp" in w for w in result.warnings)
    umask = os.umask(0)
    os.umask(umask)
    assert (out / "config.json").stat().st_mode & 0o777 == 0o666 & ~umask  # not the temp file's private 0600
    assert out.stat().st_mode & 0o777 == 0o777 & ~umask


def test_second_conversion_keeps_other_record_keys(tmp_path: Path, llama_src: Path) -> None:
    out = tmp_path / "out"
    cfg = json.loads((llama_src / "config.json").read_text())
    staged = tmp_path / "src"
    staged.mkdir()
    for f in ("model.safetensors",):
        (staged / f).write_bytes((llama_src / f).read_bytes())
    cfg["ropectl"] = {"method": "yarn:4", "base": {"rope_theta": 10000.0}}
    (staged / "config.json").write_text(json.dumps(cfg))
    convert_layout(ConvertSpec(model=str(staged), to=INTERLEAVED, output=out))
    record = json.loads((out / "config.json").read_text())["ropectl"]
    assert record["method"] == "yarn:4" and record["base"] == {"rope_theta": 10000.0}
    assert record["layout"] == INTERLEAVED
    assert json.loads((staged / "config.json").read_text()) == cfg  # the source is never modified


def test_neox_round_trip_and_gemma3_norms(tmp_path: Path) -> None:
    for factory, name in ((tiny_neox, "neox"), (tiny_gemma3, "gemma3")):
        src = factory(tmp_path / name)
        mid, back = tmp_path / f"{name}-i", tmp_path / f"{name}-h"
        result = convert_layout(ConvertSpec(model=str(src), to=INTERLEAVED, output=mid, verify=True))
        convert_layout(ConvertSpec(model=str(mid), to=HALF_SPLIT, output=back, verify=True))
        assert _raw(src) == _raw(back)
        if name == "gemma3":
            assert any(n.endswith("q_norm.weight") for n in result.tensors_permuted)
            assert result.verify is not None and result.verify.norm_tensors_checked > 0


def test_interrupt_leaves_nothing(tmp_path: Path, llama_src: Path) -> None:
    """SIGTERM mid-write: no output, no temp folder, source untouched."""
    out = tmp_path / "out"
    before = {p.name: p.read_bytes() for p in llama_src.iterdir() if p.is_file()}
    code = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from ropectl.layout.convert import ConvertSpec, convert_layout\n"
        "def hit(done, total):\n"
        "    if done: os.kill(os.getpid(), signal.SIGTERM)\n"
        f"convert_layout(ConvertSpec(model={str(llama_src)!r}, to='interleaved', output=Path({str(out)!r})), progress=hit)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "KeyboardInterrupt" in proc.stderr
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []
    assert before == {p.name: p.read_bytes() for p in llama_src.iterdir() if p.is_file()}


def test_keyboard_interrupt_in_process(tmp_path: Path, llama_src: Path) -> None:
    def stop(done: int, total: int) -> None:
        if done:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        convert_layout(ConvertSpec(model=str(llama_src), to=INTERLEAVED, output=tmp_path / "out"), progress=stop)
    assert list(tmp_path.iterdir()) == []


def test_progress_reports_all_bytes(tmp_path: Path, llama_src: Path) -> None:
    seen: list[tuple[int, int]] = []
    spec = ConvertSpec(model=str(llama_src), to=INTERLEAVED, output=tmp_path / "out")
    convert_layout(spec, progress=lambda d, t: seen.append((d, t)))
    assert seen[0][0] == 0 and seen[-1][0] == seen[-1][1] > 0


def test_signal_module_is_restored(tmp_path: Path, llama_src: Path) -> None:
    previous = signal.getsignal(signal.SIGTERM)
    convert_layout(ConvertSpec(model=str(llama_src), to=INTERLEAVED, output=tmp_path / "out"))
    assert signal.getsignal(signal.SIGTERM) == previous


def test_sharded_pytorch_bin_becomes_sharded_safetensors(tmp_path: Path) -> None:
    src = tiny_llama(tmp_path / "st")
    state = load_file(src / "model.safetensors")
    binary = tmp_path / "bin"
    binary.mkdir()
    names = sorted(state)
    halves = {"pytorch_model-00001-of-00002.bin": names[: len(names) // 2],
              "pytorch_model-00002-of-00002.bin": names[len(names) // 2:]}
    for shard, keys in halves.items():
        torch.save({k: state[k] for k in keys}, binary / shard)
    weight_map = {k: shard for shard, keys in halves.items() for k in keys}
    (binary / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (binary / "config.json").write_text((src / "config.json").read_text())
    mid, back = tmp_path / "mid", tmp_path / "back"
    convert_layout(ConvertSpec(model=str(binary), to=INTERLEAVED, output=mid, verify=True))
    index = json.loads((mid / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in state.values())
    assert not list(mid.glob("*.bin"))
    convert_layout(ConvertSpec(model=str(mid), to=HALF_SPLIT, output=back))
    for shard in set(index["weight_map"].values()):
        for name, tensor in load_file(back / shard).items():
            assert torch.equal(tensor, state[name]), name
