"""convert-layout on MLA (DeepSeek-V3 / Kimi K2): only the qk_rope_head_dim rows of each head move.

The oracle is transformers' own DeepSeek-V3, which pairs (2i, 2i+1) with rope_interleave=true and (i, i+d/2)
with false: the converted checkpoint (flag flipped by convert-layout) must give the original logits.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ropectl.layout.convert import ConvertSpec, convert_layout
from ropectl.layout.detect import HALF_SPLIT, INTERLEAVED
from tests.helpers.family_checkpoints import tiny_deepseek_v3

TOKENS = torch.arange(1, 41).remainder(120).unsqueeze(0)


def _logits(folder: Path) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        return model(TOKENS).logits


@pytest.fixture(scope="module")
def mla(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("mla")
    src = tiny_deepseek_v3(root / "src", initializer_range=0.2)
    out = root / "half"
    convert_layout(ConvertSpec(model=str(src), to=HALF_SPLIT, output=out, verify=True))
    return src, out


def test_mla_half_split_gives_the_same_logits(mla: tuple[Path, Path]) -> None:
    src, out = mla
    assert json.loads((out / "config.json").read_text())["rope_interleave"] is False
    assert (_logits(out) - _logits(src)).abs().max().item() <= 1e-5


def test_mla_only_rope_rows_move(mla: tuple[Path, Path]) -> None:
    src, out = mla
    a, b = load_file(src / "model.safetensors"), load_file(out / "model.safetensors")
    q_name = next(k for k in a if k.endswith("q_b_proj.weight"))
    kv_name = next(k for k in a if k.endswith("kv_a_proj_with_mqa.weight"))
    q_a, q_b = a[q_name].view(4, 16, -1), b[q_name].view(4, 16, -1)
    assert torch.equal(q_a[:, :8], q_b[:, :8])  # nope rows untouched
    assert torch.equal(q_b[:, 8:], q_a[:, 8:][:, [0, 2, 4, 6, 1, 3, 5, 7]])  # rope rows de-interleaved
    assert torch.equal(a[kv_name][:16], b[kv_name][:16])  # compressed kv untouched
    assert torch.equal(b[kv_name][16:], a[kv_name][16:][[0, 2, 4, 6, 1, 3, 5, 7]])
    assert all(torch.equal(a[k], b[k]) for k in a if k not in (q_name, kv_name) and "q_b_proj" not in k
               and "kv_a_proj_with_mqa" not in k)


def test_control_flag_not_flipped_changes_logits(mla: tuple[Path, Path], tmp_path: Path) -> None:
    """Negative control: the permuted weights read with the old pairing must diverge."""
    src, out = mla
    config = json.loads((out / "config.json").read_text())
    config["rope_interleave"] = True
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "model.safetensors").symlink_to(out / "model.safetensors")
    (bad / "config.json").write_text(json.dumps(config))
    assert (_logits(bad) - _logits(src)).abs().max().item() > 1e-3


def test_mla_round_trip_is_bit_exact(mla: tuple[Path, Path], tmp_path: Path) -> None:
    src, out = mla
    back = tmp_path / "back"
    convert_layout(ConvertSpec(model=str(out), to=INTERLEAVED, output=back))
    a, b = load_file(src / "model.safetensors"), load_file(back / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
