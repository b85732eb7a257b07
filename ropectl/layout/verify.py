"""``--verify``: on the real weights, RoPE in the new layout of the new q/k equals the permuted old RoPE of the old q/k.

For sampled layers, heads and positions, with a random input x (float64):
``rope_to(W_out·x + b_out) == P · rope_from(W_src·x + b_src)`` elementwise, and, independently of P, the attention
scores ``rope(q, m)·rope(k, n)`` of the two checkpoints agree. Norm weights must equal the permuted originals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ropectl.errors import VerificationError
from ropectl.layout.detect import HALF_SPLIT
from ropectl.layout.permute import head_index, projection_rows
from ropectl.layout.plan import PROJECTIONS, Geometry, TensorPlan
from ropectl.layout.weights import WeightStore

if TYPE_CHECKING:
    import torch

TOLERANCE = 1e-9  # relative, in float64; a wrong layout gives errors of order 1


@dataclass(frozen=True)
class VerifyReport:
    layers: tuple[int, ...]
    heads_checked: int
    positions: tuple[int, ...]
    max_abs_error: float
    max_rel_error: float
    score_max_rel_error: float
    norm_tensors_checked: int
    tolerance: float = TOLERANCE

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rope(v: torch.Tensor, pos: int, inv_freq: torch.Tensor, layout: str) -> torch.Tensor:
    """Rotate the last axis of ``v`` (rotary part only) at position ``pos`` in the given pairing."""
    import torch

    ang = pos * inv_freq
    c, s = torch.cos(ang), torch.sin(ang)
    if layout == HALF_SPLIT:
        x1, x2 = v[..., : inv_freq.numel()], v[..., inv_freq.numel():]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
    x1, x2 = v[..., 0::2], v[..., 1::2]
    return torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).flatten(-2)


def verify_conversion(src: WeightStore, out: WeightStore, plans: Mapping[str, TensorPlan], geo: Geometry,
                      packing: str, source: str, to: str, inv_freq: Sequence[float], max_pos: int | None,
                      seed: int = 0) -> VerifyReport:
    import torch

    freq = torch.tensor(inv_freq, dtype=torch.float64)
    layers = _sample_layers(plans)
    top = max(2, (max_pos or 4096) - 1)
    positions = tuple(sorted({0, 1, 2, 17, top // 3, top}))
    errs = {"abs": 0.0, "rel": 0.0, "score": 0.0}
    heads = 0
    for layer in layers:
        in_layer = [p for p in plans.values() if p.layer == layer]
        src_qk, out_qk = (_projections(store, in_layer, packing, geo, seed) for store in (src, out))
        heads += _check_heads(src_qk, out_qk, geo, freq, positions, source, to, errs)
    norms = _check_norms(src, out, [p for p in plans.values() if p.role not in PROJECTIONS and p.layer in layers])
    report = VerifyReport(tuple(x for x in layers if x is not None), heads, positions, errs["abs"], errs["rel"],
                          errs["score"], norms)
    if max(errs["rel"], errs["score"]) > TOLERANCE:
        raise VerificationError(
            f"converted q/k do not reproduce the original RoPE: max relative error {errs['rel']:.3g} "
            f"(scores {errs['score']:.3g}), tolerance {TOLERANCE:g}; nothing was written",
            "check --from (the source layout) and the head counts in config.json",
        )
    return report


def _sample_layers(plans: Mapping[str, TensorPlan]) -> list[int | None]:
    found = sorted({p.layer for p in plans.values() if p.role in PROJECTIONS}, key=lambda x: -1 if x is None else x)
    return sorted({found[0], found[len(found) // 2], found[-1]}, key=lambda x: -1 if x is None else x)


def _projections(store: WeightStore, plans: list[TensorPlan], packing: str, geo: Geometry,
                 seed: int) -> dict[str, torch.Tensor]:
    """{'q': (n_heads, head_dim), 'k': (n_kv, head_dim)} = W·x + b for one layer, x seeded identically."""
    import torch

    weights: dict[str, torch.Tensor] = {}
    biases: dict[str, torch.Tensor] = {}
    for plan in plans:
        if plan.role not in PROJECTIONS:
            continue
        tensor = store.get(plan.name).to(torch.float64)
        rows = projection_rows(packing, plan.role, plan.length, geo.n_heads, geo.n_kv_heads, geo.head_dim)
        for which, idx in rows.items():
            (weights if tensor.ndim == 2 else biases)[which] = tensor[torch.as_tensor(idx)]
    result = {}
    for which, w in weights.items():
        x = torch.randn(w.shape[1], generator=torch.Generator().manual_seed(seed + w.shape[1]), dtype=torch.float64)
        y = w @ x + biases.get(which, torch.zeros(w.shape[0], dtype=torch.float64))
        result[which] = y.view(-1, geo.head_dim)
    return result


def _check_heads(src: Mapping[str, torch.Tensor], out: Mapping[str, torch.Tensor], geo: Geometry,
                 freq: torch.Tensor, positions: tuple[int, ...], source: str, to: str, errs: dict[str, float]) -> int:
    import torch

    r = geo.rotary_dim
    perm = torch.as_tensor(head_index(geo.head_dim, r, to)[:r])
    freq = freq[: r // 2]

    def embed(v: torch.Tensor, pos: int, layout: str) -> torch.Tensor:
        return torch.cat([rope(v[..., :r], pos, freq, layout), v[..., r:]], dim=-1)

    checked = 0
    for which in ("q", "k"):
        if which not in src or which not in out:
            continue
        for pos in positions:
            lhs, rhs = embed(out[which], pos, to), embed(src[which], pos, source)
            rhs = torch.cat([rhs[..., :r][..., perm], rhs[..., r:]], dim=-1)
            _update(errs, "abs", "rel", lhs, rhs)
        checked += src[which].shape[0]
    if "q" in src and "k" in src:
        group = geo.n_heads // geo.n_kv_heads
        k_src, k_out = (k.repeat_interleave(group, dim=0) for k in (src["k"], out["k"]))
        for m, n in zip(positions, reversed(positions), strict=True):
            s_src = (embed(src["q"], m, source) * embed(k_src, n, source)).sum(-1)
            s_out = (embed(out["q"], m, to) * embed(k_out, n, to)).sum(-1)
            _update(errs, None, "score", s_out, s_src)
    return checked


def _update(errs: dict[str, float], abs_key: str | None, rel_key: str, lhs: torch.Tensor, rhs: torch.Tensor) -> None:
    diff = float((lhs - rhs).abs().max())
    scale = max(1.0, float(rhs.abs().max()))
    if abs_key:
        errs[abs_key] = max(errs[abs_key], diff)
    errs[rel_key] = max(errs[rel_key], diff / scale)


def _check_norms(src: WeightStore, out: WeightStore, plans: list[TensorPlan]) -> int:
    import torch

    for plan in plans:
        before, after = src.get(plan.name).reshape(-1), out.get(plan.name).reshape(-1)
        if not torch.equal(after, before[torch.as_tensor(plan.index)]):
            raise VerificationError(f"norm weight '{plan.name}' is not the permuted original; nothing was written",
                                    "report this as a bug")
    return len(plans)
