"""What ropectl says of each engine for the families beyond Llama, and published configs read as they ship.

The vLLM facts are measured by tests/compat/test_vllm_rope.py (vLLM's own model classes); here, hand-computed values
and published figures pin what the CLI prints, with negative controls.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app

FIXTURES = Path(__file__).parents[1] / "fixtures" / "configs"
runner = CliRunner()


def _folder(tmp_path: Path, config: dict[str, Any], name: str = "m") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _fixture(tmp_path: Path, name: str) -> Path:
    return _folder(tmp_path, json.loads((FIXTURES / f"{name}.json").read_text()), name)


def _patch(*args: Any) -> tuple[int, dict[str, Any] | None, str]:
    result = runner.invoke(app, ["patch", *map(str, args), "--json"])
    return result.exit_code, json.loads(result.stdout) if result.exit_code == 0 else None, result.stderr


def _vllm(data: dict[str, Any]) -> dict[str, Any]:
    return next(v for v in data["readers"] if v["reader"] == "vLLM 0.32+")


QWEN25_VL = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
             "hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4, "max_position_embeddings": 128000,
             "rope_theta": 1000000.0, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
             "vision_config": {"depth": 32, "hidden_size": 1280}}


def test_deepseek_llama3_is_yarn_in_vllm(tmp_path: Path) -> None:
    code, data, err = _patch(_fixture(tmp_path, "deepseek-v3"), "-m", "llama3", "-f", "2", "--replace-existing",
                             "--dry-run")
    assert code == 0, err
    view = _vllm(data)
    assert not view["agrees"] and "deepseek_v2.py" in view["differs"]
    # YaRN's cos/sin scale at factor 2, by hand: 0.1 ln 2 + 1
    assert view["layers"]["main"]["attention_factor"] == pytest.approx(0.1 * math.log(2) + 1)
    assert any(w.startswith("vLLM (every version): computes other RoPE") for w in data["warnings"])
    (tmp_path / "y").mkdir()
    code, data, err = _patch(_fixture(tmp_path / "y", "deepseek-v3"), "-m", "yarn", "-f", "2", "--replace-existing",
                             "--dry-run")
    assert code == 0 and _vllm(data)["agrees"]  # negative control: yarn is what vLLM builds


@pytest.mark.parametrize(("fixture", "method", "key"), [("deepseek-v3", "linear", "original_max_position_embeddings"),
                                                        ("gpt-oss-20b", "ntk", "factor")])
def test_what_vllm_cannot_build_is_refused_for_emit(tmp_path: Path, fixture: str, method: str, key: str) -> None:
    folder = _fixture(tmp_path, fixture)
    code, data, err = _patch(folder, "-m", method, "-f", "2", "--replace-existing", "--dry-run")
    assert code == 0 and f"KeyError '{key}'" in _vllm(data)["error"]
    result = runner.invoke(app, ["patch", str(folder), "-m", method, "-f", "2", "--replace-existing", "--emit", "vllm"])
    assert result.exit_code != 0 and "cannot serve this" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_qwen25_vl_hub_config_inspects_and_patches(tmp_path: Path) -> None:
    folder = _folder(tmp_path, QWEN25_VL)
    result = runner.invoke(app, ["inspect", str(folder), "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["rope_type"] == "default"
    code, data, err = _patch(folder, "-m", "yarn", "-f", "4", "--emit", "vllm")
    assert code == 0, err
    overrides = data["emit"]["hf_overrides"]
    # composite: nested where vLLM's text model reads (negative control: not at the top level); x4 from the card's
    # native 32,768 (docs/reference/model-cards.md), not from max_position_embeddings 128,000
    assert set(overrides) == {"text_config"} and overrides["text_config"]["max_position_embeddings"] == 131072
    assert overrides["text_config"]["rope_parameters"]["mrope_section"] == [16, 24, 24]
    # merged key by key into the shipped section: every key vLLM's YaRN reads is spelled (unset ones as null)
    section = overrides["text_config"]["rope_parameters"]
    assert section["attention_factor"] is None and section["mscale"] is None and section["truncate"] is True
    # MRotaryEmbedding's x4 correction range: said, not "same"
    assert any("MRotaryEmbedding" in w for w in data["warnings"])


def test_qwen2_vl_as_transformers_5_saves_it(tmp_path: Path) -> None:
    """transformers 5 saves the hub's "type": "mrope" beside its own rope_type "default": one RoPE, not a conflict."""
    from transformers import Qwen2VLConfig

    hub = {"model_type": "qwen2_vl", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
           "max_position_embeddings": 256, "rope_theta": 1e6, "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}}
    Qwen2VLConfig(**hub).save_pretrained(tmp_path / "saved")
    section = json.loads((tmp_path / "saved" / "config.json").read_text())["text_config"]["rope_parameters"]
    assert section["type"] == "mrope" and section["rope_type"] == "default"  # the form under test
    result = runner.invoke(app, ["inspect", str(tmp_path / "saved"), "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["rope_type"] == "default"
    code, data, err = _patch(tmp_path / "saved", "-m", "yarn", "-f", "4", "--dry-run")
    assert code == 0, err
    # negative control: a section that really names two methods is still refused
    section = {**section, "rope_type": "linear", "factor": 2.0}
    config = {**json.loads((tmp_path / "saved" / "config.json").read_text())}
    config["text_config"] = {**config["text_config"], "rope_parameters": section}
    result = runner.invoke(app, ["inspect", str(_folder(tmp_path, config, "bad")), "--json"])
    assert result.exit_code != 0 and "contradicts itself" in result.stderr


def test_plain_llama_overrides_stay_flat(tmp_path: Path) -> None:
    config = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 1024, "rope_theta": 10000.0}
    code, data, err = _patch(_folder(tmp_path, config), "-m", "yarn", "-f", "2", "--emit", "vllm")
    assert code == 0 and "text_config" not in data["emit"]["hf_overrides"] and not data["warnings"]
    assert "attention_factor" not in data["emit"]["hf_overrides"]["rope_parameters"]  # replaced whole: nothing to clear


def test_gemma3_as_shipped_is_trained_16k(tmp_path: Path) -> None:
    folder = _fixture(tmp_path, "gemma-3-4b-it")
    result = runner.invoke(app, ["inspect", str(folder), "--engines", "--json"])
    report = json.loads(result.stdout)
    # published: linear x8 over a 16k-trained global attention, max_position_embeddings 131072
    assert report["trained_context"] == 16384 and report["target_context"] == 131072
    differs = [v["reader"] for v in report["engines"] if not v["agrees"]]
    # transformers added Gemma 3 in 4.50.0 (its release notes): 4.50 loads it
    assert differs == ["transformers 4.43 to <4.45", "transformers 4.45 to <4.48", "transformers 4.48 to <4.50"]
    code, data, err = _patch(folder, "-m", "yarn", "-f", "4", "--replace-existing", "--dry-run")
    assert code == 0, err
    assert data["target_context"] == 65536
    line = next(w for w in data["warnings"] if w.startswith("the existing 'linear' x8"))
    assert "(16384 -> 131072)" in line and "dropped" in line and "not beyond the shipped 131072" in line


@pytest.mark.parametrize(("config", "shipped"), [
    (json.loads((FIXTURES / "llama-3.1-8b-instruct.json").read_text()), 131072),
    ({"model_type": "llama4_text", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
      "head_dim": 16, "max_position_embeddings": 10485760, "rope_theta": 500000.0,
      "rope_scaling": {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 8192}}, 10485760),
])
def test_reextension_states_the_shipped_context(tmp_path: Path, config: dict[str, Any], shipped: int) -> None:
    code, data, err = _patch(_folder(tmp_path, config), "-m", "llama3", "-f", "32", "--dry-run")
    assert code == 0, err
    line = next(w for w in data["warnings"] if w.startswith("re-extension"))
    assert f"(8192 -> {shipped})" in line


def test_one_length_parser_for_patch(tmp_path: Path) -> None:
    config = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 1024, "rope_theta": 10000.0}
    folder = _folder(tmp_path, config)
    short = _patch(folder, "-m", "yarn", "-t", "4k", "--dry-run")
    plain = _patch(folder, "-m", "yarn", "-t", "4096", "--dry-run")
    assert short[0] == plain[0] == 0 and short[1]["target_context"] == plain[1]["target_context"] == 4096
    bad = runner.invoke(app, ["patch", str(folder), "-m", "yarn", "-t", "4q", "--dry-run"])
    assert bad.exit_code != 0 and "length '4q'" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_phi3_longrope_reports_its_implied_factor(tmp_path: Path) -> None:
    folder = _fixture(tmp_path, "phi-3.5-mini-instruct")
    report = json.loads(runner.invoke(app, ["inspect", str(folder), "--json"]).stdout)
    # published: max_position_embeddings 131072 over original 4096 -> 32, which its attention factor comes from
    assert report["factor"] == 32.0 and "implied" in report["factor_source"]
    assert report["attention_factor"] == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))
    text = runner.invoke(app, ["inspect", str(folder)], env={"COLUMNS": "200"}).stdout
    assert "factor=32 (implied)" in text
    # `none` removes the published scaling without --replace-existing: the config names the original
    code, data, err = _patch(folder, "-m", "none", "--dry-run")
    assert code == 0, err
    assert data["before"]["factor"] == 32.0 and data["after"]["rope_type"] == "default"
    n = 48
    result = runner.invoke(app, ["patch", str(folder), "-m", "longrope", "-f", "32", "--replace-existing", "--dry-run",
                                 "--short-factor", ",".join(["1.0"] * n), "--long-factor", ",".join(["2.0"] * n)],
                           env={"COLUMNS": "200"})
    # the summary title counts the lists (the diff above it still shows every number)
    assert result.exit_code == 0 and "long_factor=[48 values]" in result.stdout
    summary = result.stdout[result.stdout.index("longrope:32, short_factor=[48"):]  # the config's record keeps them
    assert "short_factor=[1.0" not in summary and "long_factor=[2.0" not in summary


def test_composite_and_new_model_types_are_reported_truly(tmp_path: Path) -> None:
    folder = _fixture(tmp_path, "gemma-3-4b-it")
    report = json.loads(runner.invoke(app, ["inspect", str(folder), "--json"]).stdout)
    assert report["architectures"] == ["Gemma3ForConditionalGeneration"]
    qwen35 = {"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"],
              "text_config": {"model_type": "qwen3_5_text", "hidden_size": 64, "num_attention_heads": 2,
                              "num_key_value_heads": 1, "head_dim": 32, "max_position_embeddings": 1024,
                              "rope_parameters": {"rope_type": "default", "rope_theta": 1e7}}}
    report = json.loads(runner.invoke(app, ["inspect", str(_folder(tmp_path, qwen35, "q35")), "--json"]).stdout)
    lines = [w for w in report["warnings"] if w.startswith("transformers 4")]
    # one line for every 4.x release, and the reason is that 4.x does not know the model type (transformers 4.57.6,
    # the last 4.x wheel, has no models/qwen3_5), not that the model has no RoPE
    assert len(lines) == 1 and "does not use rotary" not in lines[0]
    assert lines[0].startswith("transformers 4.43 to <5.0: cannot load it: does not know the Qwen3.5 model types "
                               "(added in 5.x)")
    # nor that 4.x "ignores rope_parameters and uses theta=10000": it loads nothing
    assert not [w for w in report["warnings"] if "theta=10000" in w]
    # control: a model type every 4.x knows, with the same keys, keeps both the reading and the theta warning
    qwen3 = {**qwen35["text_config"], "model_type": "qwen3"}
    report = json.loads(runner.invoke(app, ["inspect", str(_folder(tmp_path, qwen3, "q3")), "--json"]).stdout)
    assert any("theta=10000" in w for w in report["warnings"])
    assert not any("Qwen3.5" in w for w in report["warnings"])


@pytest.mark.parametrize("factor", [40.0, 64.0])
def test_deepseek_softmax_scale_is_transformers(tmp_path: Path, factor: float) -> None:
    """inspect's softmax scale equals the factor transformers' DeepSeek-V3 attention puts on 1/sqrt(d)."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    rope = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": 4096, "mscale": 1.0,
            "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1, "rope_theta": 10000.0}
    config = DeepseekV3Config(vocab_size=64, hidden_size=64, intermediate_size=64, moe_intermediate_size=32,
                              num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2, n_routed_experts=4,
                              num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1, q_lora_rank=32,
                              kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16,
                              max_position_embeddings=int(4096 * factor), rope_parameters=rope)
    attention = DeepseekV3ForCausalLM(config).model.layers[0].self_attn
    oracle = attention.scaling * math.sqrt(16 + 16)
    config.save_pretrained(tmp_path / "ds")
    report = json.loads(runner.invoke(app, ["inspect", str(tmp_path / "ds"), "--json"]).stdout)
    assert report["softmax_scale"] == pytest.approx(oracle, rel=1e-6)
    assert oracle == pytest.approx((0.1 * math.log(factor) + 1) ** 2)  # 1.874 at x40, 2.005 at x64, by hand


def test_inspect_names_the_commands_patch_prints(tmp_path: Path) -> None:
    config = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 1024, "rope_theta": 10000.0}
    out = tmp_path / "y"
    code, data, err = _patch(_folder(tmp_path, config), "-m", "yarn:4", "--max-positions", "trained", "-o", out)
    assert code == 0, err
    printed = next(w for w in data["warnings"] if "serve it with: vllm serve" in w).split("serve it with: ")[1]
    report = json.loads(runner.invoke(app, ["inspect", str(out), "--engines", "--json"]).stdout)
    fixes = {v["reader"]: v["fix"] for v in report["engines"] if v["fix"]}
    # the same command (the overrides compared as JSON: key order is not meaning)
    assert _command(fixes["vLLM 0.32+"].removeprefix("serve it with: ")) == _command(printed)
    lm_line = next(w for w in data["warnings"] if w.startswith("lm-eval"))
    assert fixes["lm-eval 0.4.13+"] == "run it with: " + lm_line.split("run it with: ")[1]


def _command(line: str) -> list[Any]:
    import shlex

    return [json.loads(a) if a.startswith("{") else a for a in shlex.split(line)]


def test_gpt_oss_class_default_rope(tmp_path: Path) -> None:
    """GptOssConfig's default RoPE is yarn x32: a config.json without rope keys reads as that, and unscaled RoPE
    written for gpt-oss is spelled out so the default cannot apply (the transformers tier runs 4.55 and 4.57)."""
    from transformers import GptOssConfig

    config = {"model_type": "gpt_oss", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 16, "max_position_embeddings": 256}
    result = runner.invoke(app, ["inspect", str(_folder(tmp_path, config)), "--json"])
    report = json.loads(result.stdout)
    oracle = GptOssConfig(**config).rope_parameters  # transformers' own default
    assert report["rope_type"] == oracle["rope_type"] == "yarn" and report["factor"] == oracle["factor"]
    assert report["rope_theta"] == oracle["rope_theta"]
    code, data, err = _patch(_folder(tmp_path, {**config, "rope_theta": 1e4, "rope_scaling": None}, "n"),
                             "-m", "ntk", "-f", "2", "-o", str(tmp_path / "out"))
    assert code == 0, err
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["rope_scaling"]["rope_type"] == "default"
