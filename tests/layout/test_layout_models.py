"""End to end: converted checkpoints run in a reference model with the other RoPE pairing and give the same logits.

The reference models are the real transformers classes with ``apply_rotary_pos_emb`` swapped for the other
pairing (interleaved for Llama/Qwen2/GPT-NeoX/Phi-3, rotate_half for GPT-J). Each case has negative controls:
the classic conversion bugs must change the logits.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from ropectl.families.layouts import NEOX_FUSED
from ropectl.layout.convert import ConvertSpec, convert_layout
from ropectl.layout.detect import HALF_SPLIT, INTERLEAVED
from ropectl.layout.permute import permute_qk, permute_rows, projection_index, tensor_index
from tests.helpers.checkpoints import tiny_gptj, tiny_llama, tiny_neox, tiny_phi3, tiny_qwen2

TOKENS = torch.tensor([[5, 17, 99, 3, 64, 12, 77, 41, 8, 120, 33, 2, 90, 15, 61, 7]])
MODULES = {"llama": "llama", "qwen2": "qwen2", "gpt_neox": "gpt_neox", "phi3": "phi3", "gptj": "gptj"}


def _every_two(x: torch.Tensor) -> torch.Tensor:
    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)


def _half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def interleaved_apply(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                      unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """HF's cos/sin are cat(freqs, freqs); pair (2i, 2i+1) instead of (i, i+r/2), partial rotary kept."""
    r = cos.shape[-1]
    cos = cos[..., : r // 2].repeat_interleave(2, -1).unsqueeze(unsqueeze_dim)
    sin = sin[..., : r // 2].repeat_interleave(2, -1).unsqueeze(unsqueeze_dim)

    def rot(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x[..., :r] * cos + _every_two(x[..., :r]) * sin, x[..., r:]], dim=-1)

    return rot(q), rot(k)


def gptj_half_split_apply(tensor: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    sin = torch.cat([sin, sin], dim=-1)[:, :, None, :]
    cos = torch.cat([cos, cos], dim=-1)[:, :, None, :]
    return tensor * cos + _half(tensor) * sin


@contextlib.contextmanager
def other_pairing(model_type: str) -> Iterator[None]:
    module = importlib.import_module(f"transformers.models.{MODULES[model_type]}.modeling_{MODULES[model_type]}")
    patched = gptj_half_split_apply if model_type == "gptj" else interleaved_apply
    original = module.apply_rotary_pos_emb
    module.apply_rotary_pos_emb = patched
    try:
        yield
    finally:
        module.apply_rotary_pos_emb = original


def load(folder: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()


@torch.no_grad()
def logits(model: Any, state: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
    if state is not None:
        model.load_state_dict(state, strict=False)
    return model(TOKENS).logits


def convert(src: Path, out: Path, to: str, **kw: Any) -> Path:
    convert_layout(ConvertSpec(model=str(src), to=to, output=out, verify=True, **kw))
    return out


# Larger weights than HF's 0.02 init, so attention patterns (and thus RoPE) visibly drive the logits.
BIG = {"initializer_range": 0.1}
Case = tuple[Callable[..., Path], str, dict[str, Any]]
CASES: dict[str, Case] = {
    "llama_gqa_headdim_bias": (tiny_llama, INTERLEAVED, BIG),
    "qwen2_bias": (tiny_qwen2, INTERLEAVED, BIG),
    "neox_fused_partial": (tiny_neox, INTERLEAVED, BIG),
    "phi3_fused": (tiny_phi3, INTERLEAVED, BIG),
    "gptj_partial_native_interleaved": (tiny_gptj, HALF_SPLIT, BIG),
}


def randomize_biases(folder: Path, seed: int = 7) -> Path:
    """HF initialises biases to zero, which would hide a bias that was not permuted."""
    from safetensors.torch import load_file, save_file

    gen = torch.Generator().manual_seed(seed)
    state = load_file(folder / "model.safetensors")
    for key in [k for k in state if k.endswith(".bias")]:
        state[key] = torch.randn(state[key].shape, generator=gen).to(state[key].dtype) * 0.5
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path, Any]]:
    root = tmp_path_factory.mktemp("layout_models")
    out = {}
    for name, (factory, to, kw) in CASES.items():
        src = randomize_biases(factory(root / name, **kw))
        dst = convert(src, root / f"{name}-{to}", to)
        model = load(src)
        out[name] = (src, dst, logits(model))
    return out


def _reference(name: str, folder: Path) -> tuple[Any, torch.Tensor]:
    model_type = load(folder).config.model_type
    with other_pairing(model_type):
        model = load(folder)
        return model, logits(model)


@pytest.mark.parametrize("name", list(CASES))
def test_converted_logits_match_in_reference_model(converted: dict, name: str) -> None:
    _, dst, expected = converted[name]
    _, got = _reference(name, dst)
    assert (got - expected).abs().max().item() <= 1e-5


@pytest.mark.parametrize("name", list(CASES))
def test_unconverted_weights_fail_in_reference_model(converted: dict, name: str) -> None:
    src, _, expected = converted[name]
    _, got = _reference(name, src)
    assert (got - expected).abs().max().item() > 1e-3


def _state(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


def _assert_control_fails(name: str, converted: dict, mutate: Callable[[dict, dict], None]) -> None:
    src, dst, expected = converted[name]
    model_type = load(dst).config.model_type
    good, original = _state(dst), _state(src)
    mutate(good, original)
    with other_pairing(model_type):
        model = load(dst)
        got = logits(model, good)
    assert (got - expected).abs().max().item() > 1e-3


def test_control_llama_k_permuted_with_query_heads(converted: dict) -> None:
    def mutate(state: dict, orig: dict) -> None:
        for key in [k for k in state if "k_proj" in k]:
            state[key] = permute_qk(orig[key], 8, None, INTERLEAVED)  # 8 query heads instead of 2 kv heads

    _assert_control_fails("llama_gqa_headdim_bias", converted, mutate)


def test_control_llama_bias_not_permuted(converted: dict) -> None:
    def mutate(state: dict, orig: dict) -> None:
        for key in [k for k in state if k.endswith(("q_proj.bias", "k_proj.bias"))]:
            state[key] = orig[key]

    _assert_control_fails("llama_gqa_headdim_bias", converted, mutate)


def test_control_qwen2_bias_not_permuted(converted: dict) -> None:
    def mutate(state: dict, orig: dict) -> None:
        for key in [k for k in state if k.endswith(("q_proj.bias", "k_proj.bias"))]:
            state[key] = orig[key]

    _assert_control_fails("qwen2_bias", converted, mutate)


def test_control_neox_whole_head_permuted(converted: dict) -> None:
    def mutate(state: dict, orig: dict) -> None:
        for key in [k for k in state if "query_key_value" in k]:
            rows = orig[key].shape[0]
            idx = tensor_index(NEOX_FUSED, "qkv", rows, 2, 2, 32, 32, INTERLEAVED)  # rotary_dim ignored
            state[key] = permute_rows(orig[key], idx)

    _assert_control_fails("neox_fused_partial", converted, mutate)


def test_control_phi3_fused_treated_as_one_projection(converted: dict) -> None:
    def mutate(state: dict, orig: dict) -> None:
        for key in [k for k in state if "qkv_proj" in k]:
            w = orig[key]
            state[key] = permute_rows(w, projection_index(w.shape[0] // 16, 16, 16, INTERLEAVED))  # v moved too

    _assert_control_fails("phi3_fused", converted, mutate)


def test_control_gptj_whole_head_permuted(converted: dict) -> None:
    def mutate(state: dict, orig: dict) -> None:
        for key in [k for k in state if k.endswith(("q_proj.weight", "k_proj.weight"))]:
            state[key] = permute_qk(orig[key], 4, 16, HALF_SPLIT)

    _assert_control_fails("gptj_partial_native_interleaved", converted, mutate)


def test_sharded_checkpoint_converts_and_keeps_index(tmp_path: Path) -> None:
    import json

    from transformers import AutoModelForCausalLM

    src = tiny_llama(tmp_path / "one")
    sharded = tmp_path / "sharded"
    AutoModelForCausalLM.from_pretrained(src).save_pretrained(sharded, max_shard_size="60KB")
    before = json.loads((sharded / "model.safetensors.index.json").read_text())
    assert len(set(before["weight_map"].values())) > 2
    out = convert(sharded, tmp_path / "out", INTERLEAVED)
    after = json.loads((out / "model.safetensors.index.json").read_text())
    assert after["weight_map"] == before["weight_map"]
    assert after["metadata"]["total_size"] == before["metadata"]["total_size"]
    expected = logits(load(src))
    with other_pairing("llama"):
        got = logits(load(out))
    assert (got - expected).abs().max().item() <= 1e-5


def test_pytorch_bin_input_is_written_as_safetensors(tmp_path: Path) -> None:
    src = randomize_biases(tiny_qwen2(tmp_path / "st"))
    binary = tmp_path / "bin"
    binary.mkdir()
    model = load(src)
    torch.save(model.state_dict(), binary / "pytorch_model.bin")
    (binary / "config.json").write_text((src / "config.json").read_text())
    out = convert(binary, tmp_path / "out", INTERLEAVED)
    assert (out / "model.safetensors").is_file() and not (out / "pytorch_model.bin").exists()
    with other_pairing("qwen2"):
        got = logits(load(out))
    assert (got - logits(model)).abs().max().item() <= 1e-5
