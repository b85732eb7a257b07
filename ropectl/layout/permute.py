"""Row permutations between the interleaved (pairs 2i, 2i+1) and half-split (pairs i, i+r/2) q/k layouts.

Everything is a gather along the row axis with an index built here, so it is exact in every dtype, and the two
directions are inverse permutations. Only the first ``rotary_dim`` rows of each head move; pass-through rows of a
partially rotary head stay where they are. Indexes are numpy int64 arrays: the streaming path needs no torch (its
import alone costs more than a second and ~200 MB), while ``permute_rows`` applies them to torch tensors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ropectl.errors import LayoutError
from ropectl.families.layouts import MLA, NEOX_FUSED, PHI3_FUSED
from ropectl.layout.detect import HALF_SPLIT, INTERLEAVED

if TYPE_CHECKING:
    import numpy as np
    import torch


def head_index(head_dim: int, rotary_dim: int, to: str) -> np.ndarray:
    """Within one head: output row j takes input row ``index[j]``."""
    import numpy as np

    if rotary_dim % 2 or not 0 < rotary_dim <= head_dim:
        raise LayoutError(f"rotary dim {rotary_dim} is not an even number in (0, head_dim={head_dim}]",
                          "fix rotary_dim / partial_rotary_factor in config.json")
    half = rotary_dim // 2
    rot = np.arange(rotary_dim, dtype=np.int64)
    if to == INTERLEAVED:  # out[2i] = in[i], out[2i+1] = in[i + r/2]
        rot = rot.reshape(2, half).T.reshape(-1)
    elif to == HALF_SPLIT:  # out[i] = in[2i], out[i + r/2] = in[2i+1]
        rot = rot.reshape(half, 2).T.reshape(-1)
    else:
        raise LayoutError(f"unknown layout '{to}'", f"use {INTERLEAVED} or {HALF_SPLIT}")
    return np.concatenate([rot, np.arange(rotary_dim, head_dim, dtype=np.int64)])


def projection_index(n_heads: int, head_dim: int, rotary_dim: int, to: str) -> np.ndarray:
    """For a head-major projection of ``n_heads * head_dim`` rows (q_proj, k_proj, their biases)."""
    import numpy as np

    offsets = np.arange(n_heads, dtype=np.int64)[:, None] * head_dim
    return (offsets + head_index(head_dim, rotary_dim, to)).reshape(-1)


def projection_rows(packing: str, role: str, length: int, n_heads: int, n_kv: int,
                    head_dim: int) -> dict[str, np.ndarray]:
    """Which rows of a stored tensor form the head-major q and k projections ({'q': rows, 'k': rows})."""
    import numpy as np

    if packing == MLA:  # head_dim is the rope part: the last rows of each q head, and of the one k head
        if role == "q":
            per_head = length // n_heads
            start = np.arange(n_heads, dtype=np.int64)[:, None] * per_head + (per_head - head_dim)
            return {"q": (start + np.arange(head_dim, dtype=np.int64)).reshape(-1)}
        return {"k": length - head_dim + np.arange(head_dim, dtype=np.int64)}
    if role in ("q", "q_norm"):
        return {"q": np.arange(length, dtype=np.int64)}
    if role in ("k", "k_norm"):
        return {"k": np.arange(length, dtype=np.int64)}
    if packing == NEOX_FUSED:
        base = (np.arange(n_heads, dtype=np.int64)[:, None] * 3 * head_dim + np.arange(head_dim)).reshape(-1)
        return {"q": base, "k": base + head_dim}
    if packing == PHI3_FUSED:
        q_rows = n_heads * head_dim
        return {"q": np.arange(q_rows, dtype=np.int64), "k": q_rows + np.arange(n_kv * head_dim, dtype=np.int64)}
    raise LayoutError(f"no fused layout '{packing}' for role '{role}'", "add the packing to ropectl/families/layouts.py")


def tensor_index(packing: str, role: str, length: int, n_heads: int, n_kv: int, head_dim: int,
                 rotary_dim: int, to: str) -> np.ndarray:
    """The full row index of one stored tensor: q/k blocks permuted, everything else (v) in place."""
    import numpy as np

    index = np.arange(length, dtype=np.int64)
    for rows in projection_rows(packing, role, length, n_heads, n_kv, head_dim).values():
        heads = rows.size // head_dim
        index[rows] = rows[projection_index(heads, head_dim, rotary_dim, to)]
    return index


def permute_rows(tensor: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """Gather rows (dim 0) of a weight or a 1-D bias; no arithmetic, so bit-exact in any dtype."""
    import torch

    if tensor.shape[0] != len(index):
        raise LayoutError(f"tensor has {tensor.shape[0]} rows but the permutation has {len(index)}",
                          "check head counts and head_dim against the weights")
    return tensor.index_select(0, torch.as_tensor(index, dtype=torch.long)).contiguous()


def permute_qk(weight: torch.Tensor, n_heads: int, rotary_dim: int | None, to: str) -> torch.Tensor:
    """Convenience for one separate projection: head_dim is rows / heads, never hidden / heads."""
    rows = weight.shape[0]
    if rows % n_heads:
        raise LayoutError(f"{rows} rows do not split into {n_heads} heads", "pass the right head count")
    head_dim = rows // n_heads
    return permute_rows(weight, projection_index(n_heads, head_dim, rotary_dim or head_dim, to))
