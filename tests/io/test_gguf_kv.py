"""The metadata-only GGUF reader against the ``gguf`` package's own reader (the oracle), and on hostile files.

inspect, ``patch --dry-run`` and ``--emit`` on a GGUF read only its key/value section; ``gguf.GGUFReader`` (which
indexes every tensor and tokenizer string) is kept for writing a patched copy.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from ropectl.errors import GGUFError
from ropectl.io.gguf_meta import read_gguf_metadata
from tests.helpers.checkpoints import write_gguf

runner = CliRunner()


def oracle(path: Path) -> dict[str, Any]:
    """What gguf.GGUFReader says, with the same tokenizer arrays left out and its GGUF.* pseudo-fields dropped."""
    import gguf

    fields = gguf.GGUFReader(str(path)).fields
    return {k: f.contents() for k, f in fields.items()
            if not k.startswith("GGUF.") and (not k.startswith("tokenizer.ggml.") or k == "tokenizer.ggml.model")}


@pytest.mark.parametrize("big_endian", [False, True], ids=["little-endian", "big-endian"])
def test_values_equal_the_gguf_packages_reader(tmp_path: Path, big_endian: bool) -> None:
    path = write_gguf(tmp_path / "m.gguf", big_endian)
    ours = read_gguf_metadata(path)
    assert ours == oracle(path)
    assert ours["test.text"] == "é ✓" and ours["test.words"] == ["a", "bc"] and ours["test.u64"] == 2**40
    assert "tokenizer.ggml.tokens" not in ours and ours["tokenizer.ggml.model"] == "llama"


def test_real_smollm2_metadata_equals_the_oracle(smollm2: Path) -> None:
    assert read_gguf_metadata(smollm2) == oracle(smollm2)


def test_inspect_and_emit_do_not_index_the_tensors(smollm2: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The slow full reader is not used by read-only commands (it took ~5 s of a 6 s --emit on SmolLM2)."""
    import gguf

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("gguf.GGUFReader used on a read-only path")

    monkeypatch.setattr(gguf, "GGUFReader", refuse)
    for args in (["inspect", str(smollm2), "--json"],
                 ["patch", str(smollm2), "-m", "yarn", "-f", "2", "--emit", "llama.cpp"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    written = runner.invoke(app, ["patch", str(smollm2), "-m", "yarn", "-f", "2", "-o", "unused.gguf"])
    assert written.exit_code != 0  # negative control: the writer does use the full reader, so the guard bites


def _cut(path: Path, n: int) -> Path:
    out = path.with_name(f"cut{n}.gguf")
    out.write_bytes(path.read_bytes()[:n])
    return out


def test_truncated_anywhere_is_one_line(tmp_path: Path) -> None:
    good = write_gguf(tmp_path / "m.gguf")
    size = good.stat().st_size
    for n in (0, 3, 10, 23, 100, 400, size // 2, size - 1):
        with pytest.raises(GGUFError, match="not a readable GGUF"):
            read_gguf_metadata(_cut(good, n))
    result = runner.invoke(app, ["inspect", str(_cut(good, size - 1))])
    assert result.exit_code == 1 and "truncated" in result.stderr and result.stderr.count("\n") == 1


def _header(kv: bytes, count: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, 0, count) + kv


def _key(name: str) -> bytes:
    return struct.pack("<Q", len(name)) + name.encode()


@pytest.mark.parametrize(("kv", "count", "says"), [
    (_key("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2**62), 1, "more than the file holds"),
    (_key("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, 2**61), 1, "past the end"),
    (_key("x") + struct.pack("<IIQ", 9, 4, 2**61), 1, "more than the file holds"),
    (_key("x") + struct.pack("<I", 99), 1, "unknown value type 99"),
    (_key("x") + struct.pack("<IIQ", 9, 9, 1) + struct.pack("<IQ", 9, 1) * 20 + struct.pack("<IQ", 4, 1) + bytes(4),
     1, "nest more than"),
    (b"", 2**60, "ends inside the metadata"),
    (struct.pack("<Q", 2**63) + b"k", 1, "past the end"),
], ids=["skipped string array", "skipped float array", "kept int array", "value type", "nested arrays", "key count",
        "key length"])
def test_hostile_counts_fail_before_allocating(tmp_path: Path, kv: bytes, count: int, says: str) -> None:
    path = tmp_path / "h.gguf"
    path.write_bytes(_header(kv, count))
    with pytest.raises(GGUFError, match=says):
        read_gguf_metadata(path)


def test_hostile_tensor_index(tmp_path: Path) -> None:
    """After the metadata: a tensor claiming 2^31 dimensions, and one whose bytes lie past the end of the file."""
    index = _key("t") + struct.pack("<I", 2**31)
    (tmp_path / "d.gguf").write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + index + bytes(64))
    with pytest.raises(GGUFError, match="2,147,483,648 dimensions"):
        read_gguf_metadata(tmp_path / "d.gguf")
    index = _key("t") + struct.pack("<IQIQ", 1, 10**9, 0, 0)  # 1e9 F32 values at offset 0
    (tmp_path / "e.gguf").write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + index + bytes(64))
    with pytest.raises(GGUFError, match="truncated"):
        read_gguf_metadata(tmp_path / "e.gguf")


def test_version_1_and_garbage_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "v1.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 1, 0, 0))
    with pytest.raises(GGUFError, match="version 1"):
        read_gguf_metadata(path)
    path.write_bytes(b"GGML" + bytes(40))
    with pytest.raises(GGUFError, match="magic"):
        read_gguf_metadata(path)


@pytest.mark.parametrize("rdim", [2**31, 17, 16], ids=["H-122 2^31", "head size + 1", "head size (control)"])
def test_rope_dimension_count_is_checked_in_gguf_terms(tmp_path: Path, rdim: int) -> None:
    import gguf

    path = tmp_path / "r.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    for add, value in ((writer.add_context_length, 256), (writer.add_embedding_length, 64),
                       (writer.add_head_count, 4), (writer.add_head_count_kv, 2)):
        add(value)
    writer.add_uint32("llama.rope.dimension_count", rdim)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    result = runner.invoke(app, ["inspect", str(path)])
    if rdim == 16:
        assert result.exit_code == 0, result.output
        return
    line = result.stderr.strip()
    assert result.exit_code == 1 and line.count("\n") == 0, result.output
    assert f"llama.rope.dimension_count {rdim:,}" in line and "partial_rotary_factor" not in line
