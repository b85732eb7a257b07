"""Pure permutation properties: inverse pairs, partial rotary, fused packings, and RoPE equivariance."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ropectl.errors import LayoutError
from ropectl.families.layouts import NEOX_FUSED, PHI3_FUSED, SEPARATE, arch_for, layer_of, role_of
from ropectl.layout.detect import HALF_SPLIT, INTERLEAVED
from ropectl.layout.permute import head_index, permute_qk, permute_rows, projection_index, tensor_index
from ropectl.layout.verify import rope

# (heads, head_dim, rotary_dim): rotary is even; head_dim adds 0..8 pass-through rows.
geometry = st.tuples(st.integers(1, 6), st.integers(1, 8), st.sampled_from([0, 0, 0, 1, 2, 8])).map(
    lambda t: (t[0], 2 * t[1] + t[2], 2 * t[1]))


def llama_cpp_permute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """llama.cpp LlamaModel.permute (half-split -> interleaved), as published."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_permute(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """transformers convert_llama_weights_to_hf permute (interleaved -> half-split)."""
    dim1 = w.shape[0]
    return w.view(n_heads, dim1 // n_heads // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


@settings(max_examples=60, deadline=None)
@given(geometry, st.integers(1, 5))
def test_directions_are_inverse_and_match_reference_converters(geo: tuple[int, int, int], cols: int) -> None:
    heads, head_dim, rotary = geo
    w = torch.randn(heads * head_dim, cols)
    to_i = permute_rows(w, projection_index(heads, head_dim, rotary, INTERLEAVED))
    back = permute_rows(to_i, projection_index(heads, head_dim, rotary, HALF_SPLIT))
    assert torch.equal(back, w)
    if rotary == head_dim:
        assert torch.equal(to_i, llama_cpp_permute(w, heads))
        assert torch.equal(hf_permute(to_i, heads), w)


def rotate(y: torch.Tensor, pos: int, inv: torch.Tensor, pairs: list[tuple[int, int]]) -> torch.Tensor:
    """RoPE from its definition: pair k = (a, b) turns by angle pos * inv[k]; written apart from ropectl."""
    out = y.clone()
    for k, (a, b) in enumerate(pairs):
        c, s = torch.cos(pos * inv[k]), torch.sin(pos * inv[k])
        out[a], out[b] = y[a] * c - y[b] * s, y[a] * s + y[b] * c
    return out


def interleaved_pairs(rotary: int) -> list[tuple[int, int]]:
    return [(2 * k, 2 * k + 1) for k in range(rotary // 2)]  # GPT-J / llama.cpp: neighbours


def half_split_pairs(rotary: int) -> list[tuple[int, int]]:
    return [(k, k + rotary // 2) for k in range(rotary // 2)]  # GPT-NeoX / transformers: halves


def equivariant(perm: torch.Tensor, head_dim: int, rotary: int, pos: int) -> bool:
    """rope_interleaved(P·y) == P·rope_half_split(y) for a random y, with the reference rotation."""
    y = torch.randn(head_dim, dtype=torch.float64)
    inv = 1.0 / (10000.0 ** (torch.arange(0, rotary, 2, dtype=torch.float64) / rotary))
    lhs = rotate(y[perm], pos, inv, interleaved_pairs(rotary))
    rhs = rotate(y, pos, inv, half_split_pairs(rotary))[perm]
    return torch.allclose(lhs, rhs, rtol=0, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(geometry, st.integers(0, 5000))
def test_rope_equivariance_per_head(geo: tuple[int, int, int], pos: int) -> None:
    """ropectl's permutation carries half-split RoPE into interleaved RoPE; pass-through rows stay put."""
    _, head_dim, rotary = geo
    perm = head_index(head_dim, rotary, INTERLEAVED)
    assert perm[rotary:].tolist() == list(range(rotary, head_dim))
    assert equivariant(perm, head_dim, rotary, pos)


@pytest.mark.parametrize("wrong", ["identity", "other direction", "reversed pairs"])
def test_rope_equivariance_fails_for_a_wrong_permutation(wrong: str) -> None:
    """Negative control: the same check rejects permutations that are not the conversion."""
    head_dim = rotary = 8
    right = torch.as_tensor(head_index(head_dim, rotary, INTERLEAVED))
    perm = {"identity": torch.arange(head_dim), "other direction": torch.as_tensor(head_index(head_dim, rotary, HALF_SPLIT)),
            "reversed pairs": right.view(-1, 2).flip(1).reshape(-1)}[wrong]
    assert not torch.equal(perm, right)
    assert not equivariant(perm, head_dim, rotary, pos=5)


@pytest.mark.parametrize(("layout", "pairs"), [(INTERLEAVED, interleaved_pairs), (HALF_SPLIT, half_split_pairs)])
def test_verify_rotation_matches_the_reference(layout: str, pairs) -> None:
    """The rotation --verify uses (ropectl.layout.verify.rope) against the definition, in each pairing."""
    y = torch.randn(12, dtype=torch.float64)
    inv = 1.0 / (10000.0 ** (torch.arange(0, 12, 2, dtype=torch.float64) / 12))
    torch.testing.assert_close(rope(y, 7, inv, layout), rotate(y, 7, inv, pairs(12)), rtol=0, atol=1e-12)
    other = half_split_pairs if layout == INTERLEAVED else interleaved_pairs
    assert not torch.allclose(rope(y, 7, inv, layout), rotate(y, 7, inv, other(12)))  # negative control


def test_gqa_k_uses_kv_heads_not_query_heads() -> None:
    k = torch.arange(2 * 16, dtype=torch.float32).unsqueeze(1)
    right = permute_qk(k, 2, None, INTERLEAVED)
    wrong = permute_qk(k, 8, None, INTERLEAVED)
    assert torch.equal(right.squeeze(1)[:4], torch.tensor([0.0, 8.0, 1.0, 9.0]))
    assert not torch.equal(right, wrong)


def test_partial_rotary_moves_only_the_rotary_rows() -> None:
    idx = head_index(16, 8, INTERLEAVED)
    assert idx.tolist() == [0, 4, 1, 5, 2, 6, 3, 7, *range(8, 16)]
    assert head_index(16, 8, HALF_SPLIT).tolist() == [0, 2, 4, 6, 1, 3, 5, 7, *range(8, 16)]


def test_neox_fused_permutes_q_and_k_slots_only() -> None:
    heads, hd = 2, 4
    idx = tensor_index(NEOX_FUSED, "qkv", heads * 3 * hd, heads, heads, hd, hd, INTERLEAVED)
    per_head = [0, 2, 1, 3]
    expected = []
    for h in range(heads):
        base = h * 3 * hd
        expected += [base + i for i in per_head] + [base + hd + i for i in per_head] + list(range(base + 2 * hd,
                                                                                                  base + 3 * hd))
    assert idx.tolist() == expected


def test_phi3_fused_blocks() -> None:
    nh, nkv, hd = 4, 2, 4
    idx = tensor_index(PHI3_FUSED, "qkv", (nh + 2 * nkv) * hd, nh, nkv, hd, hd, INTERLEAVED)
    q = projection_index(nh, hd, hd, INTERLEAVED).tolist()
    k = (nh * hd + projection_index(nkv, hd, hd, INTERLEAVED)).tolist()
    v = list(range((nh + nkv) * hd, (nh + 2 * nkv) * hd))
    assert idx.tolist() == q + k + v


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_permutation_is_bit_exact(dtype: torch.dtype) -> None:
    w = torch.randn(64, 7).to(dtype)
    idx = projection_index(4, 16, 16, INTERLEAVED)
    back = permute_rows(permute_rows(w, idx), projection_index(4, 16, 16, HALF_SPLIT))
    assert torch.equal(back.view(torch.uint8 if dtype != torch.float32 else torch.int32).view(-1),
                       w.view(torch.uint8 if dtype != torch.float32 else torch.int32).view(-1))


def test_bad_rotary_and_heads_raise() -> None:
    with pytest.raises(LayoutError):
        head_index(16, 7, INTERLEAVED)
    with pytest.raises(LayoutError):
        permute_qk(torch.zeros(10, 3), 3, None, INTERLEAVED)


def test_arch_table_roles() -> None:
    _, llama = arch_for({"model_type": "llama"})
    assert llama.packing == SEPARATE
    assert role_of(llama, "model.layers.0.self_attn.q_proj.weight") == "q"
    assert role_of(llama, "model.layers.0.self_attn.k_proj.bias") == "k"
    assert role_of(llama, "model.layers.0.self_attn.v_proj.weight") is None
    _, gemma = arch_for({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text"}})
    assert role_of(gemma, "model.language_model.layers.1.self_attn.q_norm.weight") == "q_norm"
    assert role_of(gemma, "model.vision_tower.vision_model.encoder.layers.0.self_attn.q_proj.weight") is None
    assert layer_of("model.layers.12.self_attn.q_proj.weight") == 12
    assert layer_of("gpt_neox.layers.3.attention.query_key_value.weight") == 3
    assert layer_of("transformer.h.2.attn.q_proj.weight") == 2


def test_unknown_architecture_names_supported_ones() -> None:
    with pytest.raises(LayoutError, match="supported model types: .*gpt_neox.*llama"):
        arch_for({"model_type": "falcon"})
