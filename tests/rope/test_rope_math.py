"""ropectl's float64 RoPE math against transformers' own initialisation, over a grid."""

from __future__ import annotations

import itertools
import math

import pytest

from ropectl.rope.frequencies import compute_frequencies, ntk_theta
from ropectl.rope.params import RopeParams
from tests.helpers.hf_reference import hf_frequencies, max_rel_error

HEAD_DIMS = (16, 64, 80, 128)
PARTIALS = (1.0, 0.5, 0.25)
THETAS = (1e4, 5e5, 1e6)
FACTORS = (2.0, 4.0, 8.0)
ORIGINALS = (2048, 8192)
TOL = 1e-6


def _grid():
    return itertools.product(HEAD_DIMS, PARTIALS, THETAS)


def _check(params: RopeParams, head_dim: int, seq_len: int | None = None) -> None:
    ours = compute_frequencies(params, seq_len)
    inv, attention = hf_frequencies(params, head_dim, seq_len)
    assert max_rel_error(ours.inv_freq, inv) <= TOL
    assert ours.attention_factor == pytest.approx(attention, rel=TOL)


@pytest.mark.parametrize(("head_dim", "partial", "theta"), list(_grid()))
def test_default_linear_dynamic_match_transformers(head_dim: int, partial: float, theta: float) -> None:
    dim = int(head_dim * partial)
    for original, factor in itertools.product(ORIGINALS, FACTORS):
        _check(RopeParams("default", theta, dim, original), head_dim)
        _check(RopeParams("linear", theta, dim, original, {"factor": factor}), head_dim)
        for seq_len in (None, original // 2, original, 3 * original):
            _check(RopeParams("dynamic", theta, dim, original, {"factor": factor}), head_dim, seq_len)


@pytest.mark.parametrize(("head_dim", "partial", "theta"), list(_grid()))
def test_yarn_matches_transformers(head_dim: int, partial: float, theta: float) -> None:
    dim = int(head_dim * partial)
    variants = ({}, {"beta_fast": 16.0, "beta_slow": 2.0}, {"attention_factor": 1.3}, {"mscale": 1.0, "mscale_all_dim": 0.707},
                {"truncate": False})
    for original, factor, extra in itertools.product(ORIGINALS, FACTORS, variants):
        scaling = {"factor": factor, "original_max_position_embeddings": original, **extra}
        _check(RopeParams("yarn", theta, dim, int(original * factor), scaling), head_dim)


@pytest.mark.parametrize(("head_dim", "partial", "theta"), list(_grid()))
def test_llama3_matches_transformers(head_dim: int, partial: float, theta: float) -> None:
    dim = int(head_dim * partial)
    for original, factor, (low, high) in itertools.product(ORIGINALS, FACTORS, ((1.0, 4.0), (2.0, 8.0))):
        scaling = {"factor": factor, "low_freq_factor": low, "high_freq_factor": high,
                   "original_max_position_embeddings": original}
        _check(RopeParams("llama3", theta, dim, int(original * factor), scaling), head_dim)


@pytest.mark.parametrize(("head_dim", "partial", "theta"), list(_grid()))
def test_longrope_matches_transformers(head_dim: int, partial: float, theta: float) -> None:
    dim = int(head_dim * partial)
    short = [1.0 + 0.01 * i for i in range(dim // 2)]
    long = [1.0 + 0.5 * i for i in range(dim // 2)]
    for original, factor in itertools.product(ORIGINALS, FACTORS):
        for scaling in ({"short_factor": short, "long_factor": long, "original_max_position_embeddings": original},
                        {"short_factor": short, "long_factor": long, "original_max_position_embeddings": original,
                         "factor": factor, "attention_factor": 1.1}):
            params = RopeParams("longrope", theta, dim, int(original * factor), scaling)
            for seq_len in (None, original, original + 1):
                _check(params, head_dim, seq_len)


def test_reference_values() -> None:
    """Figures quoted in the reference brief."""
    assert ntk_theta(1e4, 4, 128) == pytest.approx(40889.94, abs=0.01)
    yarn = compute_frequencies(RopeParams("yarn", 5e5, 128, 32768, {"factor": 4.0, "original_max_position_embeddings": 8192}))
    assert yarn.attention_factor == pytest.approx(1.138629, abs=1e-6)
    dyn = compute_frequencies(RopeParams("dynamic", 1e4, 128, 4096, {"factor": 2.0}), seq_len=8192)
    assert dyn.effective_theta == pytest.approx(30527.7, abs=0.1)
    assert compute_frequencies(RopeParams("default", 1e4, 8, 10)).inv_freq == (1.0, 0.1, 0.01, 0.001)
    assert all(math.isfinite(v) for v in yarn.inv_freq)


def _max_error_with_zeros(ours, theirs) -> float:
    """Relative error, absolute where transformers' frequency is exactly 0 (p-RoPE's unrotated pairs)."""
    assert len(ours) == len(theirs), (len(ours), len(theirs))
    return max(abs(a - b) / abs(b) if b else abs(a) for a, b in zip(ours, theirs))


PROPE_GRID = list(itertools.product((64, 128, 256, 512), (1.0, 0.5, 0.25, 0.3), THETAS))


@pytest.mark.parametrize(("head_dim", "partial", "theta"), PROPE_GRID)
def test_proportional_matches_transformers(head_dim: int, partial: float, theta: float) -> None:
    for scaling in ({"partial_rotary_factor": partial}, *({"partial_rotary_factor": partial, "factor": f} for f in FACTORS)):
        params = RopeParams("proportional", theta, head_dim, 8192, scaling)
        ours = compute_frequencies(params)
        inv, attention = hf_frequencies(params, head_dim)
        assert len(ours.inv_freq) == head_dim // 2  # p-RoPE always covers the whole head
        assert _max_error_with_zeros(ours.inv_freq, inv) <= TOL
        assert ours.attention_factor == attention == 1.0


def test_proportional_hand_values() -> None:
    """Gemma 4 global layers: d=512, p=0.25 -> 64 rotated pairs at theta^(-2i/512), 192 zeros."""
    inv = compute_frequencies(RopeParams("proportional", 1e6, 512, 8192, {"partial_rotary_factor": 0.25})).inv_freq
    assert len(inv) == 256 and inv[64:] == (0.0,) * 192
    assert inv[1] == pytest.approx(1e6 ** (-2 / 512), rel=1e-12)
    assert inv[63] == pytest.approx(1e6 ** (-126 / 512), rel=1e-12)
    scaled = compute_frequencies(RopeParams("proportional", 1e6, 512, 8192, {"partial_rotary_factor": 0.25, "factor": 8}))
    assert scaled.inv_freq[1] == pytest.approx(inv[1] / 8, rel=1e-12)


@pytest.mark.parametrize("dim", [21, 73])
def test_odd_rotary_dim_rounds_up_like_transformers(dim: int) -> None:
    """GLM-4-MoE (21) and Qwen3-Omni (73): transformers' arange(0, d, 2) gives ceil(d/2) frequencies."""
    ours = compute_frequencies(RopeParams("default", 1e4, dim, 4096)).inv_freq
    assert len(ours) == (dim + 1) // 2
    assert ours[-1] == pytest.approx(1e4 ** (-(dim - 1) / dim), rel=1e-12)
