"""Weight files are checked as the real loaders check them: safetensors' own ``safe_open`` and ``torch.load`` are
the oracles. Every damaged file the library refuses is refused by ours, and every file it loads passes ours."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ropectl.errors import CheckpointError
from ropectl.io.safetensors_header import read_header
from ropectl.io.weight_files import check_weight_files
from tests.helpers.checkpoints import safetensors_loads, write_gguf

Header = dict[str, Any]


def ours_accepts(path: Path) -> bool:
    try:
        read_header(path)
    except CheckpointError as exc:
        assert "\n" not in str(exc) and "Fix:" in str(exc)
        return False
    return True


def split(path: Path) -> tuple[Header, bytes]:
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def join(header: Header, data: bytes, prefix: bytes = b"") -> bytes:
    text = prefix + json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def _tensors(header: Header) -> list[str]:
    """Tensor names by offset."""
    return sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"])


def _same_size_pair(header: Header) -> tuple[str, str]:
    names = _tensors(header)
    size = {n: header[n]["data_offsets"][1] - header[n]["data_offsets"][0] for n in names}
    return next((a, b) for i, a in enumerate(names) for b in names[i + 1:] if size[a] == size[b])


def _overlap(h: Header, d: bytes) -> bytes:
    a, b = _same_size_pair(h)
    h[b]["data_offsets"] = list(h[a]["data_offsets"])
    return join(h, d)


def _out_of_range(h: Header, d: bytes) -> bytes:
    last = _tensors(h)[-1]
    h[last]["data_offsets"] = [o + 64 for o in h[last]["data_offsets"]]
    return join(h, d)


def _wrong_shape(h: Header, d: bytes) -> bytes:
    name = _tensors(h)[0]
    h[name]["shape"][0] += 1
    return join(h, d)


def _gap(h: Header, d: bytes) -> bytes:
    del h[_tensors(h)[len(_tensors(h)) // 2]]  # its bytes now belong to no tensor
    return join(h, d)


def _set(field: str, value: Any) -> Callable[[Header, bytes], bytes]:
    def edit(h: Header, d: bytes) -> bytes:
        h[_tensors(h)[0]][field] = value
        return join(h, d)
    return edit


def _norm_shape_with_bool(h: Header, d: bytes) -> bytes:
    name = next(n for n in _tensors(h) if len(h[n]["shape"]) == 1)
    h[name]["shape"] = [h[name]["shape"][0], True]  # same element count to Python; not a usize to the library
    return join(h, d)


def _zero_size_at_end(h: Header, d: bytes) -> bytes:
    h["empty"] = {"dtype": "F32", "shape": [0], "data_offsets": [len(d), len(d)]}
    return join(h, d)


REFUSED: dict[str, Callable[[Header, bytes, bytes], bytes]] = {
    "truncated to 1000 bytes": lambda h, d, raw: raw[:1000],
    "one byte short": lambda h, d, raw: raw[:-1],
    "extra trailing bytes": lambda h, d, raw: raw + bytes(8),
    "header length past EOF": lambda h, d, raw: struct.pack("<Q", len(raw)) + raw[8:],
    "header length over 100 MB": lambda h, d, raw: struct.pack("<Q", 100_000_001) + raw[8:],
    "bad JSON": lambda h, d, raw: raw[:8] + b"#garbage#" + raw[17:],
    "not UTF-8": lambda h, d, raw: raw[:9] + b"\xff" + raw[10:],
    "offsets overlapping": lambda h, d, raw: _overlap(h, d),
    "offsets out of range": lambda h, d, raw: _out_of_range(h, d),
    "offsets disagree with dtype x shape": lambda h, d, raw: _wrong_shape(h, d),
    "a gap between tensors": lambda h, d, raw: _gap(h, d),
    "unknown dtype": lambda h, d, raw: _set("dtype", "F4X")(h, d),
    "NaN in the header": lambda h, d, raw: _set("note", float("nan"))(h, d),
    "three offsets": lambda h, d, raw: _set("data_offsets", [*h[_tensors(h)[0]]["data_offsets"], 0])(h, d),
    "bool in a shape": lambda h, d, raw: _norm_shape_with_bool(h, d),
    "metadata not strings": lambda h, d, raw: join({**h, "__metadata__": {"format": 1}}, d),
    "a JSON list": lambda h, d, raw: join([], d),  # type: ignore[arg-type]
    "shorter than 8 bytes": lambda h, d, raw: raw[:5],
}
ACCEPTED: dict[str, Callable[[Header, bytes, bytes], bytes]] = {
    "as saved": lambda h, d, raw: raw,
    "entries in reverse order": lambda h, d, raw: join(dict(reversed(list(h.items()))), d),
    "a leading space in the header": lambda h, d, raw: join(h, d, prefix=b" "),
    "an unknown field in an entry": lambda h, d, raw: _set("note", "x")(h, d),
    "a zero-size tensor at the end": lambda h, d, raw: _zero_size_at_end(h, d),
    "other string metadata": lambda h, d, raw: join({**h, "__metadata__": {"format": "pt", "by": "test"}}, d),
}


def _damage(folder: Path, make: Callable[[Header, bytes, bytes], bytes]) -> Path:
    path = folder / "model.safetensors"
    header, data = split(path)
    path.write_bytes(make(header, data, path.read_bytes()))
    return path


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_the_library_refuses_is_refused(single: Path, case: str) -> None:
    path = _damage(single, REFUSED[case])
    assert not safetensors_loads(path), "the damage must break the file for the real loader (else the case tests nothing)"
    assert not ours_accepts(path)
    with pytest.raises(CheckpointError, match="not a valid safetensors file"):
        check_weight_files(single)


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_what_the_library_loads_passes(single: Path, case: str) -> None:
    path = _damage(single, ACCEPTED[case])
    assert safetensors_loads(path)
    assert ours_accepts(path)
    assert check_weight_files(single).files == ("model.safetensors",)


@pytest.mark.parametrize(("case", "says"), [
    ("truncated to 1000 bytes", "truncated or corrupt"), ("one byte short", "(truncated)"),
    ("extra trailing bytes", "longer than its header declares"), ("offsets overlapping", "overlap"),
    ("a gap between tensors", "belong to no tensor"), ("offsets out of range", "(truncated)"),
    ("unknown dtype", "'F4X', which safetensors does not define"),
])
def test_refusals_name_the_cause(single: Path, case: str, says: str) -> None:
    with pytest.raises(CheckpointError) as info:
        read_header(_damage(single, REFUSED[case]))
    assert says in str(info.value)


def test_sharded_passes_and_counts(sharded: Path) -> None:
    from safetensors import safe_open

    shards = sorted(p.name for p in sharded.glob("model-*.safetensors"))
    assert len(shards) > 1
    check = check_weight_files(sharded)
    assert check.files == tuple(shards) and check.indexes == ("model.safetensors.index.json",)
    declared = 0
    for shard in shards:
        with safe_open(sharded / shard, "pt") as fh:
            declared += len(list(fh.keys()))
    assert check.tensors == declared  # counted by the library, not by our reader
    assert "headers and sizes checked (not their values)" in check.covers()


def test_shard_missing_from_the_folder(sharded: Path) -> None:
    shard = sorted(sharded.glob("model-*.safetensors"))[1]
    shard.unlink()
    with pytest.raises(CheckpointError, match=f"shard '{shard.name}' .* is missing"):
        check_weight_files(sharded)


def test_index_maps_a_tensor_to_a_shard_that_lacks_it(sharded: Path) -> None:
    from safetensors import safe_open

    path = sharded / "model.safetensors.index.json"
    index = json.loads(path.read_text())
    tensor, shard = next(iter(index["weight_map"].items()))
    other = next(s for s in index["weight_map"].values() if s != shard)
    with safe_open(sharded / other, "pt") as fh:
        assert tensor not in fh.keys()  # the oracle: the library's own reading of that shard's header
    index["weight_map"][tensor] = other
    path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=f"maps tensor '{tensor}' to '{other}', whose header does not declare"):
        check_weight_files(sharded)


def test_a_truncated_shard(sharded: Path) -> None:
    shard = sorted(sharded.glob("model-*.safetensors"))[-1]
    shard.write_bytes(shard.read_bytes()[:-4])
    assert not safetensors_loads(shard)
    with pytest.raises(CheckpointError, match=shard.name):
        check_weight_files(sharded)


def _torch_loads(path: Path) -> bool:
    import torch

    try:
        torch.load(path, weights_only=True)
    except Exception:  # torch raises RuntimeError / EOFError / UnpicklingError on a damaged archive
        return False
    return True


def test_pytorch_zip_archive(single: Path) -> None:
    import torch
    from safetensors.torch import load_file

    path = single / "pytorch_model.bin"
    torch.save(load_file(single / "model.safetensors"), path)
    (single / "model.safetensors").unlink()
    assert _torch_loads(path)
    assert check_weight_files(single).files == ("pytorch_model.bin",)
    for cut in (len(path.read_bytes()) // 2, len(path.read_bytes()) - 10):
        damaged = single / "cut" / "pytorch_model.bin"
        damaged.parent.mkdir(exist_ok=True)
        damaged.write_bytes(path.read_bytes()[:cut])
        assert not _torch_loads(damaged)
        with pytest.raises(CheckpointError, match="truncated or corrupt"):
            check_weight_files(damaged.parent)


def test_legacy_pickle_is_reported_not_checked(single: Path) -> None:
    import torch

    torch.save({"w": torch.ones(2)}, single / "extra.bin", _use_new_zipfile_serialization=False)
    check = check_weight_files(single)
    assert check.files == ("model.safetensors",)
    assert len(check.unchecked) == 1 and check.unchecked[0].startswith("extra.bin (not a zip archive")
    assert "not checked: extra.bin" in check.covers()


def test_truncated_gguf_in_the_folder(single: Path) -> None:
    good = write_gguf(single / "m.gguf")
    assert check_weight_files(single).files == ("m.gguf", "model.safetensors")
    good.write_bytes(good.read_bytes()[:-16])
    with pytest.raises(CheckpointError, match="truncated"):
        check_weight_files(single)


def test_no_weights_says_so(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert check_weight_files(tmp_path).covers() == "no weight files in the folder (only the config was checked)"



def test_seeded_damage_agrees_with_the_library(single: Path) -> None:
    """Random byte changes in the length and the header, and random cuts: our verdict is the library's, each time."""
    import random

    path = single / "model.safetensors"
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    rng = random.Random(25)
    verdicts = []
    for _ in range(150):
        damaged = bytearray(raw)
        if rng.random() < 0.2:
            damaged = damaged[:rng.randrange(len(raw))]
        else:
            at = rng.randrange(8 + n)
            damaged[at] = rng.choice([rng.randrange(256), ord(rng.choice('0123456789{}[]",: '))])
        path.write_bytes(bytes(damaged))
        verdicts.append(safetensors_loads(path))
        assert ours_accepts(path) == verdicts[-1], bytes(damaged[:8 + n])
    assert True in verdicts and False in verdicts  # both kinds of file were met
