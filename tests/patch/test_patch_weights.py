"""`ropectl patch` refuses a checkpoint whose weight files do not hold what they declare, in every mode that says
"verified", writing nothing; and its summary says what "verified" covered. safetensors' own loader is the oracle."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from tests.helpers.checkpoints import safetensors_loads, write_gguf

runner = CliRunner()
MODES = {"output": ["-o"], "in-place": ["--in-place"], "dry-run": ["--dry-run"],
         "emit": ["--emit", "vllm"]}  # the printed line would serve the broken files


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def _args(src: Path, mode: str, *extra: str) -> list[str]:
    flags = [*MODES[mode], str(src.parent / "out")] if mode == "output" else MODES[mode]
    return ["patch", str(src), "-m", "yarn", "-f", "2", *flags, *extra]


def _refused(tmp_path: Path, src: Path, mode: str, says: str) -> None:
    before = snapshot(tmp_path)
    result = runner.invoke(app, _args(src, mode))
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Fix:" in lines[0], result.stderr
    assert says in lines[0], lines[0]
    assert result.stdout == "" and "Traceback" not in result.output
    assert snapshot(tmp_path) == before  # no output, no staging folder, no backup, config.json untouched


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(("damage", "says"), [
    (lambda raw: raw[:1000], "truncated or corrupt"),
    (lambda raw: raw[:-1], "(truncated)"),
    (lambda raw: raw + bytes(8), "longer than its header declares"),
], ids=["truncated to 1000 bytes", "one byte short", "trailing bytes"])
def test_broken_single_file_is_refused(single: Path, mode: str, damage, says: str) -> None:
    path = single / "model.safetensors"
    path.write_bytes(damage(path.read_bytes()))
    assert not safetensors_loads(path)
    _refused(single.parent, single, mode, says)


@pytest.mark.parametrize("mode", ["output", "dry-run"])
def test_shard_named_in_the_index_but_missing(tmp_path: Path, sharded: Path, mode: str) -> None:
    src = sharded
    shard = sorted(src.glob("model-*.safetensors"))[2]
    shard.unlink()
    _refused(tmp_path, src, mode, f"shard '{shard.name}' listed in model.safetensors.index.json is missing")


def test_broken_shard_is_refused(tmp_path: Path, sharded: Path) -> None:
    src = sharded
    shard = sorted(src.glob("model-*.safetensors"))[0]
    shard.write_bytes(shard.read_bytes()[:1000])
    assert not safetensors_loads(shard)
    _refused(tmp_path, src, "output", shard.name)


@pytest.mark.parametrize("which", [0, 1], ids=["single file", "sharded"])
def test_valid_checkpoint_says_what_was_verified(tmp_path: Path, tiny_checkpoints: tuple[Path, Path],
                                                 which: int) -> None:
    """Negative control: intact checkpoints pass, and the summary names what was checked."""
    src = tiny_checkpoints[which]
    weights = sorted(p.name for p in src.glob("*.safetensors"))
    assert all(safetensors_loads(src / w) for w in weights)
    out = tmp_path / "out"
    result = runner.invoke(app, ["patch", str(src), "-m", "yarn", "-f", "2", "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    verification = json.loads(result.stdout)["verification"]
    assert verification["weights"]["checked"] == weights and verification["weights"]["not_checked"] == []
    assert verification["weights"]["indexes"] == (["model.safetensors.index.json"] if which else [])
    assert "not their values" in verification["weights"]["covers"] or "not its values" in verification["weights"]["covers"]
    assert "transformers builds them from the written config" in verification["covers"]
    human = runner.invoke(app, ["patch", str(src), "-m", "yarn", "-f", "2", "--dry-run"], env={"COLUMNS": "300"})
    assert human.exit_code == 0, human.output
    line = next(s for s in human.stdout.splitlines() if s.startswith("verified with transformers"))
    count = "1 weight file's header and size checked (not its values)" if not which else \
        f"{len(weights)} weight files' headers and sizes checked (not their values), 1 shard index matched to them"
    assert "rope frequencies max relative error" in line and line.endswith(count), line


def test_in_place_on_a_valid_checkpoint_still_works(single: Path) -> None:
    src = single
    result = runner.invoke(app, ["patch", str(src), "-m", "yarn", "-f", "2", "--in-place", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["verification"]["weights"]["checked"] == ["model.safetensors"]
    assert json.loads((src / "config.json").read_text())["rope_scaling"]["rope_type"] == "yarn"


def test_config_only_folder_says_only_the_config(tmp_path: Path, tiny_checkpoints: tuple[Path, Path]) -> None:
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(tiny_checkpoints[0] / "config.json", src / "config.json")
    result = runner.invoke(app, ["patch", str(src), "-m", "yarn", "-f", "2", "--dry-run"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "no weight files in the folder (only the config was checked)" in result.stdout


def test_truncated_gguf_input_writes_nothing(tmp_path: Path) -> None:
    """A GGUF is checked as it is read: tensor offsets and sizes within the file (gguf's own reader agrees)."""
    import gguf

    good = write_gguf(tmp_path / "good.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(good.read_bytes()[:-16])
    with pytest.raises(Exception):  # noqa: B017 - the oracle only has to refuse, in whatever words it uses
        [t.data.tobytes() for t in gguf.GGUFReader(str(bad)).tensors]
    before = snapshot(tmp_path)
    result = runner.invoke(app, ["patch", str(bad), "-m", "yarn", "-f", "2", "-o", str(tmp_path / "out.gguf")])
    assert result.exit_code == 1 and "truncated" in result.stderr and result.stderr.count("\n") == 1, result.output
    assert snapshot(tmp_path) == before
