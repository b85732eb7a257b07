"""Bad input gets one line on stderr naming the problem and the fix, and a non-zero exit."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from tests.helpers import checkpoints

runner = CliRunner()
LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 2048}


def assert_one_line_error(args: list[str], code: int, *needles: str) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Fix:" in lines[0], result.stderr
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0]
    return lines[0]


def test_missing_path(tmp_path: Path) -> None:
    assert_one_line_error(["inspect", str(tmp_path / "nope")], 1, "not found")


def test_invalid_config_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    assert_one_line_error(["inspect", str(tmp_path)], 1, "not valid JSON")
    (tmp_path / "config.json").write_bytes(b"\xff\xfe\x00garbage")
    assert_one_line_error(["inspect", str(tmp_path)], 1, "config.json")
    (tmp_path / "config.json").write_text("[1, 2]")
    assert_one_line_error(["inspect", str(tmp_path)], 1, "not a JSON object")


def test_folder_without_config(tmp_path: Path) -> None:
    assert_one_line_error(["inspect", str(tmp_path)], 1, "no config.json")


@pytest.mark.parametrize("model_type", ["gpt2", "bert"])
def test_model_without_rope(tmp_path: Path, model_type: str) -> None:
    checkpoints.write_config(tmp_path, {"model_type": model_type, "n_embd": 64, "n_head": 4})
    assert_one_line_error(["inspect", str(tmp_path)], 1, "does not use rotary")


@pytest.mark.parametrize(("scaling", "needle"), [
    ({"type": "ntk", "factor": 4.0}, "rope type 'ntk'"),
    ({"type": "linear", "factor": 0.0}, "factor"),
    ({"type": "linear", "factor": -2.0}, "factor"),
    ({"type": "linear", "factor": math.nan}, "factor"),
    ({"type": "dynamic"}, "no factor"),
    ({"type": "yarn", "rope_type": "linear", "factor": 2.0}, "contradicts itself"),
])
def test_malformed_rope_section(tmp_path: Path, scaling: dict, needle: str) -> None:
    checkpoints.write_config(tmp_path, {**LLAMA, "rope_theta": 1e4, "rope_scaling": scaling})
    assert_one_line_error(["inspect", str(tmp_path)], 1, needle)


def test_yarn_without_inferable_original(tmp_path: Path) -> None:
    cfg = {k: v for k, v in LLAMA.items() if k != "max_position_embeddings"}
    checkpoints.write_config(tmp_path, {**cfg, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    assert_one_line_error(["inspect", str(tmp_path)], 1, "original_max_position_embeddings")


def test_yarn_original_inferred_from_max_positions(tmp_path: Path) -> None:
    checkpoints.write_config(tmp_path, {**LLAMA, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    result = runner.invoke(app, ["inspect", str(tmp_path), "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["original_max_position_embeddings"] == 2048


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    checkpoints.write_config(tmp_path, LLAMA)
    assert_one_line_error(["inspect", str(tmp_path), "--plot", str(tmp_path / "x.jpg")], 2, ".png")
    assert runner.invoke(app, ["inspect", str(tmp_path), "--seq-len", "0"]).exit_code == 2


def _write_gguf(path: Path, arch: str) -> Path:
    return checkpoints.tiny_gguf(path, arch, context=2048)


def test_gguf_of_another_architecture(tmp_path: Path) -> None:
    gguf_file = _write_gguf(tmp_path / "gpt2.gguf", "gpt2")
    assert_one_line_error(["inspect", str(gguf_file)], 1, "architecture 'gpt2'")


def test_truncated_gguf(tmp_path: Path) -> None:
    good = _write_gguf(tmp_path / "good.gguf", "llama")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(good.read_bytes()[:100])
    assert_one_line_error(["inspect", str(bad)], 1, "not a readable GGUF")
    assert runner.invoke(app, ["inspect", str(good), "--json"]).exit_code == 0


def test_debug_shows_traceback(tmp_path: Path) -> None:
    env = {"ROPECTL_DEBUG": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "ropectl", "inspect", str(tmp_path / "nope")],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "ModelNotFoundError" in proc.stderr


@pytest.mark.parametrize(("args", "needle"), [
    (["patch"], "Missing argument 'MODEL'"),
    (["patch", "x", "--foo"], "No such option '--foo'"),
    (["no-such-command"], "No such command"),
])
def test_command_lines_that_do_not_parse_are_one_line_too(args: list[str], needle: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "ropectl", *args], capture_output=True, text=True)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and needle in lines[0] and "Fix: see '" in lines[0] and "--help'" in lines[0]


def test_entry_point_keeps_help_version_and_exit_codes(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ropectl", *args], capture_output=True, text=True)

    assert run("--version").returncode == 0 and "ropectl" in run("--version").stdout
    assert run("inspect", "--help").returncode == 0 and "--json" in run("inspect", "--help").stdout
    bare = run()
    assert bare.returncode == 2 and "Commands" in bare.stdout + bare.stderr
    missing = run("inspect", str(tmp_path / "nope"))
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1


def test_help_imports_no_heavy_libraries() -> None:
    code = ("import sys; from typer.testing import CliRunner; from ropectl.cli.app import app; r = CliRunner();"
            "[r.invoke(app, a) for a in (['--help'], ['inspect', '--help'], ['patch', '--help'],"
            " ['convert-layout', '--help'], ['eval-ppl', '--help'], ['finetune', '--help'], ['search', '--help'])];"
            "print(sorted(m for m in ('torch', 'transformers', 'datasets', 'numpy', 'safetensors', 'optuna')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_refusal_is_said_once_under_a_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchrun starts N copies that refuse alike: rank 0 says it, the others only exit with its code."""
    args = ["patch", "no-such-folder", "-m", "yarn:4"]
    monkeypatch.setenv("RANK", "1")
    quiet = CliRunner().invoke(app, args)
    monkeypatch.setenv("RANK", "0")  # control: rank 0 (and a plain process) says it
    said = CliRunner().invoke(app, args)
    assert quiet.exit_code == said.exit_code != 0
    assert quiet.stderr.strip() == "" and said.stderr.strip().startswith("error: ")


def test_an_error_that_may_differ_per_rank_is_said_by_each_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing model folder may be missing on one machine only: every rank says it, with its rank."""
    monkeypatch.setenv("RANK", "3")
    result = CliRunner().invoke(app, ["inspect", str(tmp_path / "absent")])
    assert result.exit_code != 0 and result.stderr.strip().startswith("[rank 3] error: ")
