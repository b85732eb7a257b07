"""`none` (the unscaled base) and `as-is` (the checkpoint unchanged) on checkpoints that ship a scaling: the published
Llama-3.1-8B form (llama3 x8 from 8192 to 131072), Phi-3.5-mini (LongRoPE, 48 pairs of factors) and a yarn x2 model,
each a 2-layer copy with seeded weights.

Oracles, written here apart from the code: the unscaled inverse frequencies theta^(-2i/d); the published configs'
own keys and lists, read from the fixture files; transformers' rotary classes built from the config as shipped and
from the emitted overrides; the context each published config states.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from tests.helpers.checkpoints import tiny_llama, write_config
from tests.helpers.published import published, tiny_published

runner = CliRunner()
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0, "original_max_position_embeddings": 256}
# (theta, original length, the context the config serves as published)
SHIPPED = {"llama3": (500000.0, 8192, 131072), "longrope": (10000.0, 4096, 131072), "yarn": (10000.0, 256, 512)}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("shipped")
    return {"llama3": tiny_published("llama-3.1-8b-instruct", root / "llama31"),
            "longrope": tiny_published("phi-3.5-mini-instruct", root / "phi35"),
            "yarn": tiny_llama(root / "yarn", rope_parameters=YARN, max_position_embeddings=512)}


def _run(*args: str) -> Any:
    return runner.invoke(app, [str(a) for a in args])


def _json(*args: str) -> dict[str, Any]:
    result = _run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _rotary(config: dict[str, Any]) -> tuple[list[float], float]:
    """transformers' own rotary embedding for ``config`` (a config.json dict)."""
    from transformers import AutoConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    hf = AutoConfig.for_model(**config)
    rotary = LlamaRotaryEmbedding(hf)  # Phi-3's and Llama's rotary classes read the same keys
    return rotary.inv_freq.double().tolist(), float(rotary.attention_scaling)


def _close(a: list[float], b: list[float], tol: float = 1e-6) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= tol * abs(y) for x, y in zip(a, b))


@pytest.mark.parametrize("kind", ["llama3", "yarn", "longrope"])
def test_none_is_the_unscaled_base(models: dict[str, Path], kind: str, tmp_path: Path) -> None:
    """`patch -m none` on a checkpoint shipping llama3 / yarn crashed with a TypeError; it removes the scaling."""
    theta, original, _ = SHIPPED[kind]
    dry = _run("patch", models[kind], "-m", "none", "--dry-run")
    assert dry.exit_code == 0, dry.output
    out = tmp_path / "none"
    result = _run("patch", models[kind], "-m", "none", "-o", out)
    assert result.exit_code == 0, result.output
    written = json.loads((out / "config.json").read_text())
    d = written["head_dim"]
    inv, attention = _rotary(written)
    assert _close(inv, [theta ** (-2 * i / d) for i in range(d // 2)]) and attention == 1.0
    assert written["max_position_embeddings"] == original
    if kind != "longrope":  # re-extendable: the line says what was removed, from where
        assert f"x{2 if kind == 'yarn' else 8}" in result.output and "removes it" in result.output


def _served_section(overrides: dict[str, Any]) -> dict[str, Any]:
    return overrides["rope_parameters"]


@pytest.mark.parametrize("kind", ["llama3", "yarn", "longrope"])
def test_emit_vllm_without_m_serves_the_checkpoint_as_shipped(models: dict[str, Path], kind: str) -> None:
    config = json.loads((models[kind] / "config.json").read_text())
    emit = _json("patch", models[kind], "--emit", "vllm")["emit"]
    args = shlex.split(emit["command"])
    assert args[:3] == ["vllm", "serve", str(models[kind])]
    overrides = json.loads(args[args.index("--hf-overrides") + 1])
    section = _served_section(overrides)
    _, _, context = SHIPPED[kind]
    assert args[args.index("--max-model-len") + 1] == str(context)
    shipped = config.get("rope_scaling") or config["rope_parameters"]
    if kind == "longrope":  # the published factors, as published (the fixture file, not the tiny copy)
        phi = published("phi-3.5-mini-instruct")["rope_scaling"]
        assert section["short_factor"] == phi["short_factor"] and section["long_factor"] == phi["long_factor"]
    for key in ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"):
        if key in shipped:
            assert section[key] == shipped[key], key
    # transformers builds the same RoPE from the overrides as from the config as shipped (the v5 section replaces the
    # shipped keys); a different method's line (none) is told apart: the check is not vacuous
    assert _same_as_shipped(config, section)
    assert not _same_as_shipped(config, _served_section(
        json.loads(shlex.split(_json("patch", models[kind], "-m", "none", "--emit", "vllm")["emit"]["command"])[4])))


def _same_as_shipped(config: dict[str, Any], section: dict[str, Any]) -> bool:
    served = {k: v for k, v in config.items() if k not in ("rope_scaling", "rope_theta", "rope_parameters")}
    served["rope_parameters"] = section
    if "original_max_position_embeddings" in config:  # Phi-3's top-level original length stays in the config
        served["original_max_position_embeddings"] = config["original_max_position_embeddings"]
    want, got = _rotary(config), _rotary(served)
    return _close(got[0], want[0]) and abs(got[1] - want[1]) <= 1e-9


@pytest.mark.parametrize("kind", ["llama3", "yarn", "longrope"])
def test_emit_sglang_without_m_serves_the_checkpoint_as_shipped(models: dict[str, Path], kind: str) -> None:
    config = json.loads((models[kind] / "config.json").read_text())
    emit = _json("patch", models[kind], "--emit", "sglang")["emit"]
    args = shlex.split(emit["command"])
    assert args[args.index("--model-path") + 1] == str(models[kind])
    section = json.loads(args[args.index("--json-model-override-args") + 1])["rope_parameters"]
    shipped = config.get("rope_scaling") or config["rope_parameters"]
    assert section["rope_type"] == (shipped.get("rope_type") or shipped.get("type"))
    assert args[args.index("--context-length") + 1] == str(SHIPPED[kind][2])
    for key in ("factor", "short_factor", "long_factor", "low_freq_factor", "high_freq_factor"):
        if key in shipped:
            assert section[key] == shipped[key], key


def test_emit_llama_cpp_without_m(models: dict[str, Path]) -> None:
    """yarn goes as flags; llama3 and LongRoPE reach llama.cpp only as the tensors its converter writes (for these
    architectures), so the line sets the context alone and says so."""
    yarn = _json("patch", models["yarn"], "--emit", "llama.cpp")
    args = yarn["emit"]["args"]
    flags = dict(zip(args[::2], args[1::2], strict=True))
    assert flags == {"--rope-scaling": "yarn", "--rope-scale": "2", "--rope-freq-base": "10000",
                     "--yarn-orig-ctx": "256", "--yarn-beta-fast": "32", "--yarn-beta-slow": "1", "-c": "512"}
    for kind, tensor in (("llama3", "rope_freqs"), ("longrope", "rope_factors_long/short")):
        data = _json("patch", models[kind], "--emit", "llama.cpp")
        assert data["emit"]["args"] == ["-c", "131072"]
        assert any(tensor in w and "no RoPE flag" in w for w in data["warnings"]), data["warnings"]
        # llama.cpp picks one LongRoPE list per context (src/llama-model.cpp get_rope_factors): past the original
        # 4096, the long one for every prompt, which the line says; llama3 has one tensor (the control)
        per_context = [w for w in data["warnings"] if "long factors at every position once -c exceeds" in w]
        assert len(per_context) == (kind == "longrope")


def test_llama_cpp_refuses_a_shipped_llama3_its_converter_drops(tmp_path: Path) -> None:
    """Negative control of the line above: an architecture whose converter writes no llama3 tensor (Qwen2)."""
    config = {**published("llama-3.1-8b-instruct"), "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}
    result = _run("patch", write_config(tmp_path / "q", config), "--emit", "llama.cpp")
    assert result.exit_code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "does not reach llama.cpp" in lines[0], result.stderr


def test_as_is_writes_nothing_and_takes_no_length(models: dict[str, Path], tmp_path: Path) -> None:
    dry = _run("patch", models["yarn"], "-m", "as-is", "--dry-run")
    assert dry.exit_code == 0 and dry.stdout.startswith("(no change)"), dry.output
    for args, words in ((["-m", "as-is", "-o", tmp_path / "x"], "nothing to write"),
                        (["-m", "as-is", "-t", "1k", "--emit", "vllm"], "a target length does not apply"),
                        (["-m", "none:2", "--emit", "vllm"], "method 'none' takes no factor"),
                        (["-f", "2", "--emit", "vllm"], "no scaling method given")):
        result = _run("patch", models["yarn"], *args)
        assert result.exit_code != 0
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], (args, result.stderr)
    assert not (tmp_path / "x").exists()


def test_longrope_without_lists_on_a_longrope_checkpoint_names_as_is(models: dict[str, Path]) -> None:
    result = _run("patch", models["longrope"], "-m", "longrope:32", "--replace-existing", "--emit", "vllm")
    assert result.exit_code != 0
    assert "does not reuse the longrope factors this checkpoint ships" in result.stderr
    assert "drop -m" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["patch", "eval-ppl", "eval-tasks", "eval-passkey"])
def test_as_is_is_listed_where_m_is(command: str) -> None:
    from ropectl.rope.methods import METHODS

    out = " ".join(_run(command, "--help").stdout.split())
    assert "as-is" in out and METHODS["as-is"].keeps_checkpoint
