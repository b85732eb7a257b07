"""`ropectl patch --emit vllm|llama.cpp`: the documented shapes, and nothing written."""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from ropectl.rope.frequencies import ntk_theta
from tests.helpers.checkpoints import write_config

runner = CliRunner()
QWEN = {"model_type": "qwen2", "hidden_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1,
        "intermediate_size": 96, "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 32768,
        "rope_theta": 1000000.0}
GEMMA3 = {"model_type": "gemma3_text", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "intermediate_size": 96, "num_hidden_layers": 2, "vocab_size": 128,
          "max_position_embeddings": 8192, "layer_types": ["sliding_attention", "full_attention"],
          "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                              "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}
# llama.cpp's documented RoPE flags (common/arg.cpp) and which take a number.
LLAMA_CPP_FLAGS = {"--rope-scaling", "--rope-scale", "--rope-freq-base", "--yarn-orig-ctx", "--yarn-beta-fast",
                   "--yarn-beta-slow", "--yarn-attn-factor", "-c", "--override-kv"}


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(tmp_path_factory.mktemp("qwen") / "m", QWEN)


def emit(model: Path, *args: str) -> tuple[int, dict | None, str]:
    before = sorted(p.name for p in model.parent.rglob("*"))
    result = runner.invoke(app, ["patch", str(model), *args, "--json"])
    assert sorted(p.name for p in model.parent.rglob("*")) == before  # emit writes nothing
    return result.exit_code, json.loads(result.stdout) if result.exit_code == 0 else None, result.stderr


def flags(args: list[str]) -> dict[str, str]:
    assert len(args) % 2 == 0
    pairs = dict(zip(args[::2], args[1::2], strict=True))
    assert set(pairs) <= LLAMA_CPP_FLAGS, set(pairs) - LLAMA_CPP_FLAGS
    return pairs


def test_vllm_yarn_matches_documented_shape(qwen: Path) -> None:
    code, data, err = emit(qwen, "-m", "yarn", "-f", "4", "--emit", "vllm")
    assert code == 0, err
    e = data["emit"]
    assert e["hf_overrides"] == {"rope_parameters": {
        "rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0, "original_max_position_embeddings": 32768,
        "beta_fast": 32.0, "beta_slow": 1.0},
        # vLLM 0.30+ takes yarn's max_position_embeddings as already scaled: the override must say the target
        "max_position_embeddings": 131072}
    assert e["max_model_len"] == 131072
    args = shlex.split(e["command"])
    assert args[:3] == ["vllm", "serve", str(qwen)]
    assert json.loads(args[args.index("--hf-overrides") + 1]) == e["hf_overrides"]
    assert args[args.index("--max-model-len") + 1] == "131072"
    assert data["output"] is None and data["files"] == []


def test_vllm_ntk_is_a_theta_change(qwen: Path) -> None:
    code, data, _ = emit(qwen, "-m", "ntk", "-f", "2", "--emit", "vllm")
    assert code == 0
    params = data["emit"]["hf_overrides"]["rope_parameters"]
    assert params["rope_type"] == "default"  # never vLLM's own "ntk" type, whose formula differs
    assert params["rope_theta"] == pytest.approx(ntk_theta(1e6, 2.0, 64))
    assert data["emit"]["hf_overrides"]["max_position_embeddings"] == 65536


def test_vllm_linear_does_not_double_count(qwen: Path) -> None:
    code, data, _ = emit(qwen, "-m", "linear", "-f", "2", "--emit", "vllm")
    assert code == 0
    # vLLM multiplies M by the factor itself: M stays the trained 32768, so it derives 65536, not 131072
    assert data["emit"]["hf_overrides"]["max_position_embeddings"] == 32768
    assert data["emit"]["max_model_len"] == 65536


def test_vllm_dynamic_is_its_static_equivalent(qwen: Path) -> None:
    code, data, _ = emit(qwen, "-m", "dynamic", "-f", "2", "--emit", "vllm")
    assert code == 0 and any("static equivalent for exactly 65536 tokens" in w for w in data["warnings"])
    # transformers' dynamic base at 65536 tokens: 1e6 * (2 * 65536 / 32768 - 1) ** (64 / 62), for head_dim 64
    assert data["emit"]["hf_overrides"] == {
        "rope_parameters": {"rope_type": "default", "rope_theta": pytest.approx(1e6 * 3 ** (64 / 62))},
        "max_position_embeddings": 65536}


def test_vllm_per_layer_is_nested(tmp_path: Path) -> None:
    code, data, err = emit(write_config(tmp_path / "g", GEMMA3), "-m", "yarn", "-f", "2", "--emit", "vllm")
    assert code == 0, err
    params = data["emit"]["hf_overrides"]["rope_parameters"]
    assert params["sliding_attention"] == {"rope_type": "default", "rope_theta": 1e4}
    assert params["full_attention"]["rope_type"] == "yarn" and params["full_attention"]["rope_theta"] == 1e6


def test_llama_cpp_yarn(qwen: Path) -> None:
    code, data, err = emit(qwen, "-m", "yarn", "-f", "4", "--emit", "llama.cpp")
    assert code == 0, err
    f = flags(data["emit"]["args"])
    assert f == {"--rope-scaling": "yarn", "--rope-scale": "4", "--rope-freq-base": "1000000",
                 "--yarn-orig-ctx": "32768", "--yarn-beta-fast": "32", "--yarn-beta-slow": "1", "-c": "131072"}


def test_llama_cpp_yarn_custom_attention(qwen: Path) -> None:
    code, data, _ = emit(qwen, "-m", "yarn", "-f", "4", "--attention-factor", "1.2", "--emit", "llama.cpp")
    assert code == 0
    f = flags(data["emit"]["args"])
    # llama.cpp replaces --yarn-attn-factor by its own 0.1 ln(s) + 1, then multiplies in the GGUF key.
    assert "--yarn-attn-factor" not in f
    key, value = f["--override-kv"].split("=float:")
    assert key == "qwen2.rope.scaling.attn_factor"
    assert float(value) * (0.1 * math.log(4) + 1) == pytest.approx(1.2, rel=1e-8)


def test_llama_cpp_linear_and_ntk(qwen: Path) -> None:
    code, data, _ = emit(qwen, "-m", "linear", "-f", "2", "--emit", "llama.cpp")
    assert flags(data["emit"]["args"]) == {"--rope-scaling": "linear", "--rope-scale": "2",
                                           "--rope-freq-base": "1000000", "-c": "65536"}
    code, data, _ = emit(qwen, "-m", "ntk", "-f", "2", "--emit", "llama.cpp")
    f = flags(data["emit"]["args"])
    assert f["--rope-scaling"] == "none" and f["-c"] == "65536"
    assert float(f["--rope-freq-base"]) == pytest.approx(ntk_theta(1e6, 2.0, 64), rel=1e-9)


@pytest.mark.parametrize("method", ["dynamic", "llama3"])
def test_llama_cpp_cannot_express(qwen: Path, method: str) -> None:
    code, _, err = emit(qwen, "-m", method, "-f", "2", "--emit", "llama.cpp")
    assert code == 2 and "cannot be expressed as llama.cpp flags" in err and len(err.strip().splitlines()) == 1


def test_emit_refuses_output(qwen: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["patch", str(qwen), "-m", "linear", "-f", "2", "--emit", "vllm",
                                 "-o", str(tmp_path / "x")])
    assert result.exit_code == 2 and "writes nothing" in result.stderr and not (tmp_path / "x").exists()


def test_emit_plain_output_is_the_command(qwen: Path) -> None:
    result = runner.invoke(app, ["patch", str(qwen), "-m", "yarn", "-f", "2", "--emit", "llama.cpp"])
    assert result.exit_code == 0
    assert result.stdout.startswith("llama-server -m ") and "--rope-scaling yarn" in result.stdout


def test_llama_cpp_command_never_names_an_hf_folder(qwen: Path, smollm2: Path) -> None:
    """R-21: llama-server cannot load a Hugging Face folder, so the printed -m names a GGUF, and the summary says how."""
    result = runner.invoke(app, ["patch", str(qwen), "-m", "yarn", "-f", "2", "--emit", "llama.cpp"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("llama-server -m MODEL.gguf ") and str(qwen) not in result.stdout.split("\n")[0]
    assert "convert_hf_to_gguf.py" in result.output
    gguf = runner.invoke(app, ["patch", str(smollm2), "-m", "yarn", "-f", "2", "--emit", "llama.cpp"])
    assert gguf.exit_code == 0 and gguf.stdout.startswith(f"llama-server -m {smollm2} ")  # control: a GGUF is named
    assert "convert_hf_to_gguf" not in gguf.output


def test_yarn_folder_serves_the_target_in_every_vllm(qwen: Path, tmp_path: Path) -> None:
    """The default write form: max_position_embeddings is the target, which vLLM 0.30+ serves as is and vLLM up
    to 0.29 derives as original x factor: no vLLM line, no lm-eval line."""
    result = runner.invoke(app, ["patch", str(qwen), "-m", "yarn:4", "-o", str(tmp_path / "y"), "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert not [w for w in data["warnings"] if w.startswith(("vLLM", "lm-eval"))]
    views = {r["reader"]: r for r in data["readers"] if r["engine"] in ("vLLM", "lm-eval")}
    assert all(v["agrees"] and v["serving_length"] == 131072 for v in views.values()) and len(views) == 4


def test_yarn_folder_names_the_newest_vllm_once(qwen: Path, tmp_path: Path) -> None:
    """The --max-positions trained form keeps the trained length, which vLLM 0.30+ serves as is: one line says so,
    with the override; vLLM up to 0.29 (original x factor = the target) is not named; --json lists every view."""
    result = runner.invoke(app, ["patch", str(qwen), "-m", "yarn:4", "-o", str(tmp_path / "y"), "--max-positions",
                                 "trained", "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    vllm_lines = [w for w in data["warnings"] if w.startswith("vLLM")]
    assert len(vllm_lines) == 1 and vllm_lines[0].startswith("vLLM 0.32+: derives a max length of 32768")
    assert "--max-model-len 131072" in vllm_lines[0]
    views = {r["reader"]: r for r in data["readers"] if r["reader"].startswith("vLLM")}
    assert set(views) == {"vLLM 0.0 to <0.30", "vLLM 0.30 to <0.32", "vLLM 0.32+"}
    assert views["vLLM 0.32+"]["differs"].startswith("accepts at most 32768") and views["vLLM 0.0 to <0.30"]["differs"] is None
    assert views["vLLM 0.30 to <0.32"]["differs"] == views["vLLM 0.32+"]["differs"]


def test_vllm_serve_line_is_unwrapped_at_a_narrow_terminal(qwen: Path, tmp_path: Path) -> None:
    """The `vllm serve ...` line of patch's text warnings copy-pastes whole at 60 columns (issue 16, section 3)."""
    import io

    from rich.console import Console
    from rich.text import Text

    out = tmp_path / "y"
    args = ["patch", str(qwen), "-m", "yarn:4", "-o", str(out), "--max-positions", "trained"]
    text = runner.invoke(app, args, env={"COLUMNS": "60"})
    assert text.exit_code == 0, text.stderr
    data = json.loads(runner.invoke(app, [*args, "--force", "--json"]).stdout)  # the oracle: the JSON warnings
    warning = next(w for w in data["warnings"] if "serve it with: vllm serve " in w)
    command = warning.split("serve it with: ", 1)[1]
    assert len(command) > 60 and shlex.split(command)[:3] == ["vllm", "serve", str(out)]
    lines = text.stdout.splitlines()
    assert f"warning: {warning}" in lines  # one line, byte for byte
    # controls: the terminal really is 60 wide (other lines are wrapped to it), and rich would wrap the warning there
    assert all(len(line) <= 60 for line in lines if not line.startswith("warning:"))
    narrow = Console(width=60, file=io.StringIO())
    narrow.print(Text(warning))
    assert command not in narrow.file.getvalue()


def test_vllm_refuses_per_layer_partial_rotary(tmp_path: Path) -> None:
    """Gemma 4: p-RoPE (partial 0.25) on full attention only. One partial factor in every overrides section would make
    vLLM rotate a quarter of the sliding heads, so --emit refuses and names the patched folder (the vLLM family tier
    serves that folder and matches transformers)."""
    from tests.helpers.cli import one_line

    config = {"model_type": "gemma4_text", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 16, "per_layer_config": {"1": {"head_dim": 32}}, "num_hidden_layers": 2,
              "layer_types": ["sliding_attention", "full_attention"], "max_position_embeddings": 4096,
              "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                  "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                     "rope_theta": 1000000.0}}}
    model = write_config(tmp_path / "g4", config)
    one_line(["patch", str(model), "-m", "ntk:2", "--emit", "vllm"], "per-layer partial rotary",
             "serve the patched folder")
    # control: a per-layer model without a partial factor still gets its overrides
    config["rope_parameters"]["full_attention"] = {"rope_type": "default", "rope_theta": 1000000.0}
    plain = write_config(tmp_path / "g4-full", config)
    result = CliRunner().invoke(app, ["patch", str(plain), "-m", "ntk:2", "--emit", "vllm"])
    assert result.exit_code == 0 and "--hf-overrides" in result.stdout, result.output
