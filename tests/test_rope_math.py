"""ropectl's float64 RoPE math against transformers' own initialisation, over a grid."""

from __future__ import annotations

import itertools
import math

import pytest
from hf_reference import hf_frequencies, max_rel_error

from ropectl.rope.frequencies import compute_frequencies, ntk_theta
from ropectl.rope.params import RopeParams

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
