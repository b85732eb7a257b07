"""``ropectl convert-layout`` through the Typer app: JSON and summary output, warnings, --verify, inspect."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from tests.helpers.checkpoints import tiny_gptj, tiny_llama

runner = CliRunner()


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama(tmp_path_factory.mktemp("cli") / "llama")


def test_json_output_is_one_object(llama: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(app, ["convert-layout", str(llama), "--to", "interleaved", "-o", str(out), "--verify",
                                 "--json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert (d["from"], d["to"]) == ("half-split", "interleaved")
    assert (d["num_attention_heads"], d["num_key_value_heads"], d["head_dim"], d["rotary_dim"]) == (8, 2, 16, 16)
    assert d["tensors_permuted"] == 8 and d["verify"]["max_rel_error"] < 1e-9
    assert d["verify"]["layers"] == [0, 1] and d["verify"]["heads_checked"] == 2 * (8 + 2)
    assert any("silently compute garbage" in w for w in d["warnings"])
    assert (out / "model.safetensors").is_file()


def test_summary_prints_direction_and_warning(llama: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["convert-layout", str(llama), "--to", "interleaved", "-o", str(tmp_path / "o"),
                                 "--verify"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "half-split → interleaved" in text
    assert "verified" in text and "warning:" in text and "llama.cpp" in text
    # the head count is not read as one more layer ("layers 0, 1, 20 heads").
    assert "verified on layers 0, 1 (20 heads in all)" in text


def test_gptj_converts_to_half_split_from_format(tmp_path: Path) -> None:
    src = tiny_gptj(tmp_path / "gptj")
    result = runner.invoke(app, ["convert-layout", str(src), "--to", "half-split", "-o", str(tmp_path / "o"), "--json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert d["from"] == "interleaved" and "gptj" in d["from_reason"] and d["rotary_dim"] == 8


def test_from_overrides_format_detection(llama: Path, tmp_path: Path) -> None:
    """Meta-style interleaved weights saved under an HF Llama config: --from says so."""
    result = runner.invoke(app, ["convert-layout", str(llama), "--from", "interleaved", "--to", "half-split",
                                 "-o", str(tmp_path / "o"), "--json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert d["from_reason"] == "declared with --from" and d["warnings"] == []


def test_force_replaces_existing_output(llama: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    args = ["convert-layout", str(llama), "--to", "interleaved", "-o", str(out)]
    assert runner.invoke(app, args).exit_code == 0
    (out / "model.safetensors").write_bytes(b"stale")  # a file ropectl wrote may be replaced
    assert runner.invoke(app, args).exit_code == 1
    assert runner.invoke(app, [*args, "--force"]).exit_code == 0
    assert (out / "model.safetensors").stat().st_size > 5
    (out / "stale.txt").write_text("x")  # one it did not write may not
    assert runner.invoke(app, [*args, "--force"]).exit_code == 1 and (out / "stale.txt").exists()


def test_no_fsync_writes_the_same_bytes_without_flushing(llama: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import ropectl.layout.convert as convert

    synced: list[Path] = []
    real = convert.fsync_file
    monkeypatch.setattr(convert, "fsync_file", lambda path: (synced.append(path), real(path)))
    outputs = {}
    for flag in ("--fsync", "--no-fsync"):
        synced.clear()
        out = outputs[flag] = tmp_path / flag
        assert runner.invoke(app, ["convert-layout", str(llama), "--to", "interleaved", "-o", str(out), flag]).exit_code == 0
        # every file but the manifest of what ropectl wrote (a marker, not checkpoint data)
        expected = {p.name for p in out.iterdir()} - {".ropectl-output.json"} if flag == "--fsync" else set()
        assert {p.name for p in synced} == expected
    for path in sorted(outputs["--fsync"].iterdir()):
        assert (outputs["--no-fsync"] / path.name).read_bytes() == path.read_bytes(), path.name


def test_inspect_reports_converted_layout(llama: Path, tmp_path: Path) -> None:
    pytest.importorskip("ropectl.cli.inspect_cmd")
    out = tmp_path / "o"
    assert runner.invoke(app, ["convert-layout", str(llama), "--to", "interleaved", "-o", str(out)]).exit_code == 0
    result = runner.invoke(app, ["inspect", str(out), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["layout"] == "interleaved"


def test_help_lists_options() -> None:
    result = runner.invoke(app, ["convert-layout", "--help"])
    assert result.exit_code == 0
    for flag in ("--to", "--from", "--output", "--verify", "--force", "--no-fsync", "--json"):
        assert flag in result.output
