"""Row permutations between the interleaved (pairs 2i, 2i+1) and half-split (pairs i, i+r/2) q/k layouts.

Everything is a gather along the row axis with an index built here, so it is exact in every dtype, and the two
directions are inverse permutations. Only the first ``rotary_dim`` rows of each head move; pass-through rows of a
partially rotary head stay where they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ropectl.errors import LayoutError
from ropectl.layout.archs import NEOX_FUSED, PHI3_FUSED
from ropectl.layout.detect import HALF_SPLIT, INTERLEAVED

if TYPE_CHECKING:
    import torch


def head_index(head_dim: int, rotary_dim: int, to: str) -> torch.Tensor:
    """Within one head: output row j takes input row ``index[j]``."""
    import torch

    if rotary_dim % 2 or not 0 < rotary_dim <= head_dim:
        raise LayoutError(f"rotary dim {rotary_dim} is not an even number in (0, head_dim={head_dim}]",
                          "fix rotary_dim / partial_rotary_factor in config.json")
    half = rotary_dim // 2
    rot = torch.arange(rotary_dim)
    if to == INTERLEAVED:  # out[2i] = in[i], out[2i+1] = in[i + r/2]
        rot = rot.view(2, half).t().reshape(-1)
    elif to == HALF_SPLIT:  # out[i] = in[2i], out[i + r/2] = in[2i+1]
        rot = rot.view(half, 2).t().reshape(-1)
    else:
        raise LayoutError(f"unknown layout '{to}'", f"use {INTERLEAVED} or {HALF_SPLIT}")
    return torch.cat([rot, torch.arange(rotary_dim, head_dim)])


def projection_index(n_heads: int, head_dim: int, rotary_dim: int, to: str) -> torch.Tensor:
    """For a head-major projection of ``n_heads * head_dim`` rows (q_proj, k_proj, their biases)."""
    import torch

    offsets = torch.arange(n_heads).unsqueeze(1) * head_dim
    return (offsets + head_index(head_dim, rotary_dim, to)).reshape(-1)


def projection_rows(packing: str, role: str, length: int, n_heads: int, n_kv: int,
                    head_dim: int) -> dict[str, torch.Tensor]:
    """Which rows of a stored tensor form the head-major q and k projections ({'q': rows, 'k': rows})."""
    import torch

    if role in ("q", "q_norm"):
        return {"q": torch.arange(length)}
    if role in ("k", "k_norm"):
        return {"k": torch.arange(length)}
    if packing == NEOX_FUSED:
        base = (torch.arange(n_heads).unsqueeze(1) * 3 * head_dim + torch.arange(head_dim)).reshape(-1)
        return {"q": base, "k": base + head_dim}
    if packing == PHI3_FUSED:
        q_rows = n_heads * head_dim
        return {"q": torch.arange(q_rows), "k": q_rows + torch.arange(n_kv * head_dim)}
    raise LayoutError(f"no fused layout '{packing}' for role '{role}'", "add the packing to ropectl/layout/archs.py")


def tensor_index(packing: str, role: str, length: int, n_heads: int, n_kv: int, head_dim: int,
                 rotary_dim: int, to: str) -> torch.Tensor:
    """The full row index of one stored tensor: q/k blocks permuted, everything else (v) in place."""
    import torch

    index = torch.arange(length)
    for rows in projection_rows(packing, role, length, n_heads, n_kv, head_dim).values():
        heads = rows.numel() // head_dim
        index[rows] = rows[projection_index(heads, head_dim, rotary_dim, to)]
    return index


def permute_rows(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Gather rows (dim 0) of a weight or a 1-D bias; no arithmetic, so bit-exact in any dtype."""
    if tensor.shape[0] != index.numel():
        raise LayoutError(f"tensor has {tensor.shape[0]} rows but the permutation has {index.numel()}",
                          "check head counts and head_dim against the weights")
    return tensor.index_select(0, index).contiguous()


def permute_qk(weight: torch.Tensor, n_heads: int, rotary_dim: int | None, to: str) -> torch.Tensor:
    """Convenience for one separate projection: head_dim is rows / heads, never hidden / heads."""
    rows = weight.shape[0]
    if rows % n_heads:
        raise LayoutError(f"{rows} rows do not split into {n_heads} heads", "pass the right head count")
    head_dim = rows // n_heads
    return permute_rows(weight, projection_index(n_heads, head_dim, rotary_dim or head_dim, to))
