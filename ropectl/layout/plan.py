"""Match tensors to q/k roles, check their shapes against the config, and build each tensor's row index."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ropectl.errors import CheckpointError, ConfigError, LayoutError
from ropectl.families.layouts import MLA, UNITS, Arch, layer_of, role_of
from ropectl.layout.permute import tensor_index
from ropectl.schema import ModelRope
from ropectl.schema.layers import text_config

if TYPE_CHECKING:
    import numpy as np

PROJECTIONS = ("q", "k", "qkv")


@dataclass(frozen=True)
class Geometry:
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rotary_dim: int


@dataclass(frozen=True)
class TensorPlan:
    name: str
    role: str  # q, k, qkv, q_norm, k_norm
    layer: int | None
    length: int  # rows of a weight/bias; elements of a norm weight
    index: np.ndarray


def plan_tensors(arch: Arch, model_type: str, cfg: Mapping[str, Any], mr: ModelRope,
                 shapes: Mapping[str, tuple[int, ...]], to: str) -> tuple[Geometry, dict[str, TensorPlan]]:
    """Everything needed to permute, decided before a byte is written; shape problems raise here."""
    roles = {name: role for name in shapes if (role := role_of(arch, name))}
    if not any(r in PROJECTIONS for r in roles.values()):
        patterns = ", ".join(p for p in (arch.q, arch.k, arch.qkv) if p)
        raise CheckpointError(f"no q/k projection tensors in this '{model_type}' checkpoint match {patterns}",
                              "check that the weights belong to this config")
    _refuse_quantized(roles, shapes)
    projections = {n: shapes[n] for n, r in roles.items() if r in PROJECTIONS}
    geo = _mla_geometry(cfg, mr, projections, roles) if arch.packing == MLA else _geometry(arch, cfg, mr, projections,
                                                                                               roles)
    plans: dict[str, TensorPlan] = {}
    cache: dict[tuple[str, int], np.ndarray] = {}
    for name, role in roles.items():
        length = _length(name, role, shapes[name], geo)
        key = (role, length)
        if key not in cache:
            cache[key] = tensor_index(arch.packing, role, length, geo.n_heads, geo.n_kv_heads, geo.head_dim,
                                      geo.rotary_dim, to)
        plans[name] = TensorPlan(name, role, layer_of(name), length, cache[key])
    return geo, plans


def _refuse_quantized(roles: Mapping[str, str], shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Scales, zero points or packed parts beside a q/k tensor would need the same permutation; refuse them."""
    modules = {name.rsplit(".", 1)[0] + "." for name in roles}
    extra = sorted(n for n in shapes if n not in roles and any(n.startswith(m) for m in modules))
    if extra:
        raise CheckpointError(f"q/k projections carry extra tensors such as '{extra[0]}' ({len(extra)} in all): "
                              "quantized or packed q/k cannot be permuted row by row here",
                              "convert the unquantized checkpoint, then quantize")


def _geometry(arch: Arch, cfg: Mapping[str, Any], mr: ModelRope, shapes: Mapping[str, tuple[int, ...]],
              roles: Mapping[str, str]) -> Geometry:
    nh, nkv = mr.num_attention_heads, mr.num_key_value_heads
    if not arch.gqa:
        nkv = nh
    found: dict[int, str] = {}
    for name, shape in shapes.items():
        a, b = UNITS[(arch.packing, roles[name])]
        units = a * nh + b * nkv
        if len(shape) not in (1, 2) or not shape[0]:
            raise CheckpointError(f"'{name}' has shape {list(shape)}; a q/k projection is a matrix or a bias",
                                  "quantized or packed q/k tensors are not supported; dequantize first")
        if shape[0] % units:
            raise CheckpointError(
                f"'{name}' has {shape[0]} rows, which do not split into {units} heads "
                f"({_units_text(a, b, nh, nkv)} from config.json)",
                "fix num_attention_heads / num_key_value_heads in config.json to match the weights")
        found.setdefault(shape[0] // units, name)
    tc = text_config(cfg)
    explicit = tc.get("head_dim")
    if len(found) > 1 or (explicit and int(explicit) not in found):
        detail = "; ".join(f"'{n}' gives head_dim {d}" for d, n in found.items())
        said = f" but config.json says head_dim {explicit}" if explicit else ""
        raise CheckpointError(f"tensor shapes disagree with the config: {detail}{said} "
                              f"(heads {nh}, key-value heads {nkv})",
                              "fix head_dim / num_attention_heads / num_key_value_heads in config.json")
    head_dim = next(iter(found))
    if arch.rotary == "rotary_dim" and tc.get("rotary_dim"):
        rotary = int(tc["rotary_dim"])
    else:
        rotary = int(head_dim * mr.partial_rotary_factor)
    if rotary % 2 or not 0 < rotary <= head_dim:
        raise ConfigError(f"rotary dim {rotary} is not an even number in (0, head_dim={head_dim}]",
                          "fix rotary_dim / rotary_pct / partial_rotary_factor in config.json")
    return Geometry(nh, nkv, head_dim, rotary)


def _mla_geometry(cfg: Mapping[str, Any], mr: ModelRope, shapes: Mapping[str, tuple[int, ...]],
                  roles: Mapping[str, str]) -> Geometry:
    """MLA: only qk_rope_head_dim rows per head rotate; q heads are nope + rope, the key is one rope head."""
    tc = text_config(cfg)
    rope, nope, rank = (int(tc.get(k) or 0) for k in ("qk_rope_head_dim", "qk_nope_head_dim", "kv_lora_rank"))
    if not rope or rope % 2:
        raise ConfigError(f"qk_rope_head_dim {rope} is not a positive even number", "fix qk_rope_head_dim in config.json")
    nh = mr.num_attention_heads
    for name, shape in shapes.items():
        want = nh * (nope + rope) if roles[name] == "q" else rank + rope
        if len(shape) != 2 or shape[0] != want:
            what = f"{nh} heads x (qk_nope {nope} + qk_rope {rope})" if roles[name] == "q" else \
                f"kv_lora_rank {rank} + qk_rope {rope}"
            raise CheckpointError(f"'{name}' has shape {list(shape)} but config.json gives {want} rows ({what})",
                                  "fix the MLA sizes in config.json to match the weights")
    return Geometry(nh, 1, rope, rope)


def _units_text(a: int, b: int, nh: int, nkv: int) -> str:
    parts = [f"{a}×{nh} heads" if a != 1 else f"{nh} heads"] if a else []
    parts += [f"{b}×{nkv} key-value heads" if b != 1 else f"{nkv} key-value heads"] if b else []
    return " + ".join(parts)


def _length(name: str, role: str, shape: tuple[int, ...], geo: Geometry) -> int:
    if role in PROJECTIONS:
        return shape[0]
    numel = math.prod(shape)
    if numel % geo.head_dim or not numel:
        raise CheckpointError(f"norm weight '{name}' has {numel} elements, not a multiple of head_dim {geo.head_dim}",
                              "check that the weights belong to this config")
    return numel


def check_layouts(to: str, declared: str | None, known: tuple[str, str], record: Mapping[str, Any]) -> tuple[str, str]:
    """(source layout, why); refuses a conversion to the layout the checkpoint already has."""
    recorded = record.get("layout")
    if declared and recorded and declared != recorded:
        raise LayoutError(f"--from {declared} contradicts config.json, where ropectl recorded layout '{recorded}'",
                          "drop --from; ropectl wrote these weights and knows their layout")
    source, why = (declared, "declared with --from") if declared else known
    if source == to:
        raise LayoutError(f"the checkpoint is already {to} ({why})",
                          "nothing to convert; pass the other --to, or --from if the detected layout is wrong")
    return source, why
