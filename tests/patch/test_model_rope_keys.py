"""Rope keys that the model reads beside its rotary class are carried through patch, and "verified" means that
transformers' own forward ran.

Ministral 3 (transformers 5.24, models/ministral3/modeling_ministral3.py, Ministral3Attention.forward) multiplies the
queries by ``1 + llama_4_scaling_beta x ln(1 + floor(position / original_max_position_embeddings))``, both read from
``config.rope_parameters``; without either the first forward raises TypeError. The oracle is transformers' forward
of the same weights under a config edited by hand (the method's keys written here, apart from ropectl), and a
config whose forward fails is the negative control that patch's verification must refuse.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from ropectl.errors import VerificationError
from ropectl.patch.verify import verify_config
from ropectl.rope.params import RopeParams
from tests.helpers.family_checkpoints import tiny_ministral3

runner = CliRunner()
HEAD = 16
FACTOR = 32
TRAINED = 16384
POSITIONS = list(range(40_000, 40_008))  # past the trained 16,384: the query temperature is 1 + 0.1 ln 3 there


def _by_hand(config: dict, method: str) -> dict:
    """The source config with the method's keys written by hand (transformers 5 rope_parameters), the model's own
    llama_4_scaling_beta and original length kept."""
    rope = config["rope_parameters"]
    own = {"llama_4_scaling_beta": rope["llama_4_scaling_beta"], "original_max_position_embeddings": TRAINED}
    theta = float(rope["rope_theta"])
    sections = {
        "yarn": {"rope_type": "yarn", "rope_theta": theta, "factor": float(FACTOR), "beta_fast": 32.0,
                 "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
        # static NTK: a new base theta x s^(d / (d - 2))
        "ntk": {"rope_type": "default", "rope_theta": theta * FACTOR ** (HEAD / (HEAD - 2))},
        "linear": {"rope_type": "linear", "rope_theta": theta, "factor": float(FACTOR)},
    }
    return {**config, "rope_parameters": {**sections[method], **own},
            "max_position_embeddings": TRAINED * FACTOR}


def _logits(folder: Path, config: dict | None = None):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    kwargs = {}
    if config is not None:
        (folder / "hand").mkdir(exist_ok=True)
        (folder / "hand" / "config.json").write_text(json.dumps(config))
        kwargs["config"] = AutoConfig.from_pretrained(folder / "hand")
    model = AutoModelForCausalLM.from_pretrained(folder, **kwargs).eval()
    ids = torch.arange(len(POSITIONS))[None] % 100 + 3
    with torch.no_grad():
        return model(input_ids=ids, position_ids=torch.tensor([POSITIONS]), attention_mask=torch.ones_like(ids)).logits


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_ministral3(tmp_path_factory.mktemp("ministral3") / "src")


@pytest.mark.parametrize("method", ["yarn", "ntk", "linear"])
def test_ministral3_patch_runs_through_transformers_forward(method: str, source: Path, tmp_path: Path) -> None:
    import torch

    out = tmp_path / "out"
    result = runner.invoke(app, ["patch", str(source), "-m", method, "-f", str(FACTOR), "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["verification"]["forward"]["ran"] is True
    written = json.loads((out / "config.json").read_text())
    for key in ("rope_parameters", "rope_scaling"):
        if written.get(key) is not None:
            assert written[key]["llama_4_scaling_beta"] == 0.1, key
            assert written[key]["original_max_position_embeddings"] == TRAINED, key
    got = _logits(out)
    assert torch.isfinite(got).all()
    want = _logits(source, _by_hand(json.loads((source / "config.json").read_text()), method))
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
    assert any("llama_4_scaling_beta=0.1" in w for w in data["warnings"])


def test_the_query_temperature_is_the_models_own() -> None:
    """transformers' own scale at the positions run, against the formula written here."""
    import torch
    from transformers.models.ministral3.modeling_ministral3 import get_llama_4_attn_scale

    scale = get_llama_4_attn_scale(torch.tensor([POSITIONS]), 0.1, TRAINED).flatten()
    assert scale.tolist() == pytest.approx([1 + 0.1 * math.log(1 + p // TRAINED) for p in POSITIONS], rel=1e-6)


def _expected(config: dict) -> dict[str, RopeParams]:
    rope = config["rope_parameters"]
    scaling = {k: v for k, v in rope.items() if k not in ("rope_type", "rope_theta", "type")}
    return {"main": RopeParams("yarn", rope["rope_theta"], HEAD, config["max_position_embeddings"], scaling)}


def test_verification_refuses_a_config_whose_forward_fails(source: Path, tmp_path: Path) -> None:
    """Negative control: the patched config with llama_4_scaling_beta dropped (what patch wrote before) builds the
    same rotary embedding, and its forward raises TypeError: verification must refuse it."""
    out = tmp_path / "out"
    assert runner.invoke(app, ["patch", str(source), "-m", "yarn", "-f", str(FACTOR), "-o", str(out)]).exit_code == 0
    good = json.loads((out / "config.json").read_text())
    broken = json.loads(json.dumps(good))
    for key in ("rope_parameters", "rope_scaling"):
        broken[key].pop("llama_4_scaling_beta")
    shipped = json.loads((source / "config.json").read_text())
    assert verify_config(good, _expected(good), source=shipped).forward.skipped == ""
    with pytest.raises(VerificationError, match="TypeError.*while the unpatched config runs"):
        verify_config(broken, _expected(broken), source=shipped)


def test_an_architecture_that_fails_unpatched_too_is_not_claimed_to_run(source: Path, tmp_path: Path) -> None:
    """Where the unpatched config's tiny copy fails the same way, the forward is reported as not run, not as run."""
    out = tmp_path / "out"
    assert runner.invoke(app, ["patch", str(source), "-m", "yarn", "-f", str(FACTOR), "-o", str(out)]).exit_code == 0
    broken = json.loads((out / "config.json").read_text())
    for key in ("rope_parameters", "rope_scaling"):
        broken[key].pop("llama_4_scaling_beta")
    check = verify_config(broken, _expected(broken), source=broken).forward
    assert check.skipped and "TypeError" in check.skipped
    assert check.to_dict()["ran"] is False
