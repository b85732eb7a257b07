"""Bad input: each case is a one-line error (right exit code through the CLI) and nothing is written."""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from ropectl.cli.app import app
from ropectl.errors import CheckpointError, LayoutError, OutputError, RopectlError, UsageError
from ropectl.layout.convert import ConvertSpec, convert_layout
from tests.helpers.checkpoints import write_config


def _fails(src: Path, error: type[RopectlError], match: str, to: str = "interleaved", code: int = 1,
           **kw: object) -> None:
    out = src.parent / "out"
    with pytest.raises(error, match=match) as info:
        convert_layout(ConvertSpec(model=str(src), to=to, output=out, **kw))  # type: ignore[arg-type]
    assert "\n" not in str(info.value) and "Fix:" in str(info.value)
    assert not out.exists()
    assert not [p for p in src.parent.iterdir() if "ropectl-tmp" in p.name]
    result = CliRunner().invoke(app, ["convert-layout", str(src), "--to", to, "-o", str(out)]
                                + (["--from", str(kw["from_layout"])] if kw.get("from_layout") else []))
    assert result.exit_code == code, result.output
    assert result.output.count("\n") == 1 and result.output.startswith("error: ")
    assert not out.exists()


def _edit_index(folder: Path, edit: Callable[[dict], None]) -> None:
    path = folder / "model.safetensors.index.json"
    index = json.loads(path.read_text())
    edit(index)
    path.write_text(json.dumps(index))


def _edit_config(folder: Path, **changes: object) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    write_config(folder, cfg)


def test_missing_shard(sharded: Path) -> None:
    shard = sorted(sharded.glob("model-*.safetensors"))[1]
    shard.unlink()
    _fails(sharded, CheckpointError, f"shard '{shard.name}' .* is missing")


def test_truncated_header(single: Path) -> None:
    path = single / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:100])
    _fails(single, CheckpointError, r"header claims .* \(truncated or corrupt\)")


def test_file_shorter_than_header_length(single: Path) -> None:
    (single / "model.safetensors").write_bytes(b"\x01\x02")
    _fails(single, CheckpointError, "shorter than the 8-byte header length")


def test_corrupted_header_json(single: Path) -> None:
    path = single / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[8:20] = b"#garbage#!!!"
    path.write_bytes(bytes(data))
    _fails(single, CheckpointError, "JSON header does not parse")


def test_truncated_data(single: Path) -> None:
    path = single / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    _fails(single, CheckpointError, r"only .* are present \(truncated\)")


def test_header_sizes_disagree_with_dtype(single: Path) -> None:
    path = single / "model.safetensors"
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    name = next(k for k in header if k.endswith("v_proj.weight"))
    header[name]["shape"] = [header[name]["shape"][0] + 1, header[name]["shape"][1]]
    raw = json.dumps(header, separators=(",", ":")).encode().ljust(n)
    assert len(raw) == n
    path.write_bytes(data[:8] + raw + data[8 + n:])
    _fails(single, CheckpointError, "needs .* bytes but its offsets span")


@pytest.mark.parametrize("shard", ["../elsewhere.safetensors", "/etc/passwd", "sub/../../x.safetensors"])
def test_index_naming_shard_outside_folder(sharded: Path, shard: str) -> None:
    def edit(index: dict) -> None:
        first = next(iter(index["weight_map"]))
        index["weight_map"][first] = shard

    _edit_index(sharded, edit)
    _fails(sharded, CheckpointError, "outside the checkpoint folder")


def test_shapes_disagree_with_config(single: Path) -> None:
    _edit_config(single, num_key_value_heads=4)  # k_proj has 2 heads x 16 rows: 32 / 4 = 8 != 16
    _fails(single, CheckpointError, "tensor shapes disagree with the config")


def test_head_dim_in_config_disagrees(single: Path) -> None:
    _edit_config(single, head_dim=8)  # the weights have 16 rows per head
    _fails(single, CheckpointError, "config.json says head_dim 8")


def test_heads_do_not_divide_rows(single: Path) -> None:
    _edit_config(single, num_attention_heads=5, num_key_value_heads=1)
    _fails(single, CheckpointError, "do not split into 5 heads")


def test_already_in_target_layout(single: Path) -> None:
    _fails(single, LayoutError, "already half-split", to="half-split")


def test_second_conversion_same_direction_refused(single: Path) -> None:
    first = single.parent / "first"
    convert_layout(ConvertSpec(model=str(single), to="interleaved", output=first))
    # The reason given is the config's record; the metadata-only case below must give another one.
    _fails(first, LayoutError, r"already interleaved \(converted from half-split by ropectl convert-layout\)")


def test_layout_recorded_only_in_safetensors_metadata(single: Path) -> None:
    """config.json replaced by the original one: the shard metadata still tells the layout."""
    first = single.parent / "first"
    convert_layout(ConvertSpec(model=str(single), to="interleaved", output=first))
    shutil.copy(single / "config.json", first / "config.json")
    _fails(first, LayoutError, "already interleaved .*safetensors metadata")
    with pytest.raises(LayoutError) as info:  # negative control: the config no longer records the layout
        convert_layout(ConvertSpec(model=str(first), to="interleaved", output=single.parent / "out2"))
    assert "converted from half-split by ropectl convert-layout" not in str(info.value)


def test_from_contradicting_recorded_layout(single: Path) -> None:
    first = single.parent / "first"
    convert_layout(ConvertSpec(model=str(single), to="interleaved", output=first))
    _fails(first, LayoutError, "contradicts config.json", to="interleaved", from_layout="half-split")


def test_output_inside_source(single: Path) -> None:
    inside = single / "converted"
    with pytest.raises(OutputError, match="inside the source"):
        convert_layout(ConvertSpec(model=str(single), to="interleaved", output=inside))
    assert not inside.exists()
    result = CliRunner().invoke(app, ["convert-layout", str(single), "--to", "interleaved", "-o", str(inside)])
    assert result.exit_code == 1 and result.output.count("\n") == 1
    assert not inside.exists()


def test_unknown_architecture(single: Path) -> None:
    _edit_config(single, model_type="falcon")
    _fails(single, LayoutError, "supported model types: .*llama.*phi3")


def test_quantized_qk_is_refused(single: Path) -> None:
    from safetensors.torch import load_file, save_file

    state = load_file(single / "model.safetensors")
    state["model.layers.0.self_attn.q_proj.weight_scale"] = torch.ones(128, 1)
    save_file(state, single / "model.safetensors", metadata={"format": "pt"})
    _fails(single, CheckpointError, "weight_scale.*quantized or packed")


def _code_running(marker: Path) -> type:
    """A class whose pickle runs `touch marker` when unpickled: the file a hostile checkpoint would hold."""

    class Evil:
        def __reduce__(self) -> tuple:
            return (os.system, (f"touch {marker}",))

    return Evil


def test_non_tensor_pickle_is_refused_without_running_it(tmp_path: Path, tiny_checkpoints: tuple[Path, Path]) -> None:
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(tiny_checkpoints[0] / "config.json", src / "config.json")
    marker = tmp_path / "ran"
    Evil = _code_running(marker)

    torch.save({"model.embed_tokens.weight": torch.zeros(2), "x": Evil()}, src / "pytorch_model.bin")
    _fails(src, CheckpointError, "weights-only loading refused it")
    assert not marker.exists()


@pytest.mark.parametrize("form", ["zip", "legacy", "raw"], ids=["H-97 zip", "H-98 legacy", "H-99 raw pickle"])
def test_code_pickle_refusal_is_one_line_naming_the_call(tmp_path: Path, tiny_checkpoints: tuple[Path, Path], form: str) -> None:
    """One line that names the call the pickle would make, with no torch warnings and no advice to unpickle."""
    import pickle

    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(tiny_checkpoints[0] / "config.json", src / "config.json")
    marker = tmp_path / "ran"
    Evil = _code_running(marker)

    payload, path = {"w": Evil()}, src / "pytorch_model.bin"
    if form == "raw":
        path.write_bytes(pickle.dumps(payload))
    else:
        torch.save(payload, path, _use_new_zipfile_serialization=form == "zip")
    result = CliRunner().invoke(app, ["convert-layout", str(src), "--to", "interleaved", "-o", str(tmp_path / "o")])
    assert result.exit_code == 1 and result.stderr.count("\n") == 1, result.stderr
    # torch names the global for zip and legacy files; a raw pickle stops at an opcode it does not know.
    said = "holds more than plain tensors" if form == "raw" else "would call posix.system when loaded"
    assert said in result.stderr, result.stderr
    assert "weights_only` set to `False`" not in result.stderr and "Fix: use a safetensors copy" in result.stderr
    assert not marker.exists() and not (tmp_path / "o").exists()


def test_bad_option_values_are_usage_errors(single: Path) -> None:
    with pytest.raises(UsageError, match="--to 'sideways'"):
        ConvertSpec(model=str(single), to="sideways", output=single.parent / "out")
    with pytest.raises(UsageError, match="needs --output"):
        ConvertSpec(model=str(single), to="interleaved", output=None)
    args = ["convert-layout", str(single), "--to", "sideways", "-o", str(single.parent / "o")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and result.output.startswith("error: ")


def test_gguf_input_is_refused(smollm2: Path, tmp_path: Path) -> None:
    with pytest.raises(LayoutError, match="not GGUF"):
        convert_layout(ConvertSpec(model=str(smollm2), to="half-split", output=tmp_path / "out"))
    assert not (tmp_path / "out").exists()
