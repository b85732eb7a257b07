"""The vLLM and llama.cpp reader entries: their predictions on hand-written configs, against hand-computed values.

The real engines check the same rules in tests/compat/test_vllm.py and test_llama_cpp.py (``make compat``).
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from ropectl.cli.app import app
from ropectl.readers import BUILTIN, llama_cpp, vllm
from tests.helpers.checkpoints import write_config

LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "intermediate_size": 96, "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 4096,
         "rope_theta": 10000.0}


def _cfg(max_pos: int, **scaling: object) -> dict:
    scaling = {"type": scaling["rope_type"], **scaling}
    return {**LLAMA, "max_position_embeddings": max_pos, "rope_scaling": scaling}


def test_both_engines_are_listed() -> None:
    assert "ropectl.readers.vllm" in BUILTIN and "ropectl.readers.llama_cpp" in BUILTIN


@pytest.mark.parametrize("version, rope, max_pos, served", [
    ("0.32.0", {"rope_type": "linear", "factor": 2.0}, 4096, 8192),  # 4096 x 2
    # yarn, from vllm/config/model.py of each release: 0.30+ take max_position_embeddings as it stands, up to 0.29
    # original_max_position_embeddings (transformers fills it from max_position_embeddings when unset) x factor
    ("0.32.0", {"rope_type": "yarn", "factor": 2.0}, 4096, 4096),
    ("0.30.0", {"rope_type": "yarn", "factor": 2.0}, 4096, 4096),
    ("0.29.0", {"rope_type": "yarn", "factor": 2.0}, 4096, 8192),
    ("0.32.0", {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 4096}, 8192, 8192),
    ("0.32.0", {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 2048}, 8192, 8192),
    ("0.29.0", {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 2048}, 8192, 4096),
    ("0.29.0", {"rope_type": "linear", "factor": 2.0}, 4096, 8192),
    ("0.32.0", {"rope_type": "dynamic", "factor": 2.0}, 4096, 4096),  # accepts 8192, undefined past the 4096-row table
])
def test_vllm_serving_length(version: str, rope: dict, max_pos: int, served: int) -> None:
    reading = vllm.predict(vllm.reader_for(version), _cfg(max_pos, **rope))
    assert reading.ok and reading.serving_length == served


def test_vllm_plain_rope_serves_max_positions() -> None:
    assert vllm.predict(vllm.newest(), {**LLAMA, "rope_theta": 22081.0}).serving_length == 4096


def test_vllm_dynamic_is_static_at_max_positions() -> None:
    # max_trained_positions 2048, max_position_embeddings 4096, factor 2, rotary dim 16:
    # 1e4 * (2 * 4096 / 2048 - 1) ** (16 / 14) = 1e4 * 3 ** (8 / 7)
    cfg = _cfg(4096, rope_type="dynamic", factor=2.0, max_trained_positions=2048)
    (rope,) = vllm.predict(vllm.newest(), cfg).ropes.values()
    assert rope.rope_type == "default" and rope.rope_theta == pytest.approx(1e4 * 3 ** (8 / 7))


def test_vllm_max_positions_for_a_target() -> None:
    from ropectl.rope.params import RopeParams

    linear = RopeParams("linear", 1e4, 16, 4096, {"factor": 2.0})
    yarn = RopeParams("yarn", 1e4, 16, 4096, {"factor": 2.0, "original_max_position_embeddings": 4096})
    assert vllm.max_positions_for(vllm.newest(), "llama", linear, 8192) == 4096
    assert vllm.max_positions_for(vllm.newest(), "llama", yarn, 8192) == 8192
    # up to 0.29 yarn's length is original x factor = 4096 x 2, whatever max_position_embeddings says
    old = vllm.reader_for("0.29.0")
    for max_pos in (4096, vllm.max_positions_for(old, "llama", yarn, 8192)):
        assert vllm.derived_length(old, "llama", yarn, max_pos) == 8192
    # a non-integer factor: ceil(10000 / 3.3) = 3031, and 3031 * 3.3 = 10002.3 >= 10000
    assert vllm.max_positions_for(vllm.newest(), "llama", linear.with_(scaling={"factor": 3.3}), 10000) == 3031


def test_llama_cpp_betas() -> None:
    assert llama_cpp.ignored_betas("llama", {"beta_fast": 16.0, "beta_slow": 1.0}) == {"beta_fast": 16.0}
    assert llama_cpp.ignored_betas("grok", {"beta_fast": 16.0}) == {}
    cfg = _cfg(4096, rope_type="yarn", factor=2.0, beta_fast=16.0, beta_slow=2.0)
    (rope,) = llama_cpp.predict(llama_cpp.READERS[-1], cfg).ropes.values()
    assert (rope.scaling["beta_fast"], rope.scaling["beta_slow"]) == (32.0, 1.0)


def test_llama_cpp_has_no_dynamic() -> None:
    assert not llama_cpp.predict(llama_cpp.READERS[-1], _cfg(4096, rope_type="dynamic", factor=2.0)).ok


def test_llama_cpp_flags_for_yarn_attention(tmp_path: Path) -> None:
    import json
    import math

    from typer.testing import CliRunner

    folder = write_config(tmp_path / "m", LLAMA)
    out = CliRunner().invoke(app, ["patch", str(folder), "-m", "yarn", "-f", "2", "--attention-factor", "1.2",
                                   "--emit", "llama.cpp", "--json"])
    args = json.loads(out.stdout)["emit"]["args"]
    flags = dict(zip(args[::2], args[1::2]))
    assert "--yarn-attn-factor" not in flags  # llama.cpp replaces it by its own YaRN factor
    # 1.2 / (0.1 ln 2 + 1) = 1.2 / 1.0693147...: llama.cpp multiplies the key into its own factor
    key, value = flags["--override-kv"].split("=")
    assert key == "llama.rope.scaling.attn_factor"
    assert float(value.split(":")[1]) == pytest.approx(1.2 / (1 + 0.1 * math.log(2)), rel=1e-9)
    assert flags["-c"] == "8192" and flags["--yarn-beta-fast"] == "32"
    assert shlex.split(json.loads(out.stdout)["emit"]["command"])[0] == "llama-server"


def test_ntk_folder_is_not_said_to_use_theta_10000(tmp_path: Path) -> None:
    """An NTK patch writes rope_parameters and a top-level rope_theta (no rope_scaling): 4.x reads that theta."""
    import json

    from typer.testing import CliRunner

    src = write_config(tmp_path / "m", LLAMA)
    runner = CliRunner()
    assert runner.invoke(app, ["patch", str(src), "-m", "ntk", "-f", "2", "-o", str(tmp_path / "ntk")]).exit_code == 0
    written = json.loads((tmp_path / "ntk" / "config.json").read_text())
    assert "rope_scaling" not in written and written["rope_theta"] > 10000.0
    out = runner.invoke(app, ["inspect", str(tmp_path / "ntk"), "--json"])
    assert out.exit_code == 0 and "theta=10000" not in out.stdout
