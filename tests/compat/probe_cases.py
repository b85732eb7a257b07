"""The jobs tests/compat/rope_probe.py runs in the vLLM and SGLang venvs (Dual Chunk Attention, LongRoPE), the
oracles they are checked against (written here, apart from ropectl), and what ropectl says of the same configs.

- Dual Chunk Attention, Qwen2.5-1M's form at a small scale (chunk 2048, local 256: one intra chunk of 1792): the key
  table of DualChunkRotaryEmbedding is plain RoPE of ``position mod (chunk - local)`` with rope_theta alone, and a
  yarn section beside the key changes nothing (the control: the same section without the key builds YaRN).
- LongRoPE (a 64-dim head, original 4096): which list each batch of positions gets, as cos/sin of the short or the
  long factors, inv_i = 1 / (factor_i x theta^(2i / d)), times sqrt(1 + ln(max / original) / ln(original)).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

HEAD, THETA, CHUNK, LOCAL, MAX_POSITION = 64, 1e7, 2048, 256, 4096
DCA = {"chunk_size": CHUNK, "local_size": LOCAL, "original_max_position_embeddings": CHUNK}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}
DCA_POSITIONS = [0, 1, CHUNK - LOCAL - 1, CHUNK - LOCAL, CHUNK - LOCAL + 1, 4000]
ORIGINAL = 4096
SHORT = [1.0 + 0.05 * i for i in range(HEAD // 2)]
LONG = [2.0 + 2.0 * i for i in range(HEAD // 2)]
# a short prompt alone; the same batched with one long request; a lone prompt whose last position is the original
BATCHES = [list(range(8)), [*range(8), ORIGINAL + 1], list(range(ORIGINAL + 1))]
LONGROPE = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": SHORT, "long_factor": LONG,
            "original_max_position_embeddings": ORIGINAL}
QWEN_1M = Path(__file__).parents[1] / "fixtures" / "configs" / "qwen2.5-7b-instruct-1m.json"


def dca_jobs() -> list[dict[str, Any]]:
    base = {"kind": "dca", "head": HEAD, "max_position": MAX_POSITION, "positions": DCA_POSITIONS}
    plain = {"rope_theta": THETA, "rope_type": "default"}
    return [{**base, "name": "dca", "rope_parameters": plain, "dual_chunk_attention_config": DCA},
            {**base, "name": "dca+yarn", "rope_parameters": {"rope_theta": THETA, **YARN},
             "dual_chunk_attention_config": DCA},
            {**base, "name": "yarn", "rope_parameters": {"rope_theta": THETA, **YARN}}]


def longrope_jobs() -> list[dict[str, Any]]:
    return [{"name": f"longrope/{n}", "kind": "longrope", "head": HEAD, "max_position": 2 * ORIGINAL,
             "rope_parameters": LONGROPE, "max_model_len": n, "batches": BATCHES} for n in (ORIGINAL, ORIGINAL + 1)]


def dca_key_rows() -> tuple[list[list[float]], list[list[float]]]:
    """cos and sin of DualChunkRotaryEmbedding's key table at DCA_POSITIONS: plain RoPE of p mod (chunk - local)."""
    inv = [THETA ** (-2 * i / HEAD) for i in range(HEAD // 2)]
    wrapped = [p % (CHUNK - LOCAL) for p in DCA_POSITIONS]
    return ([[math.cos(p * f) for f in inv] for p in wrapped], [[math.sin(p * f) for f in inv] for p in wrapped])


def which_list(batch: dict[str, Any], row: int = 7) -> str:
    """"short" or "long": the list whose cos/sin the row at ``row`` holds (position ``row``), else "?"."""
    scale = math.sqrt(1 + math.log(2 * ORIGINAL / ORIGINAL) / math.log(ORIGINAL))
    for name, factors in (("short", SHORT), ("long", LONG)):
        want = [math.sin(row / (f * 10000.0 ** (2 * i / HEAD))) * scale for i, f in enumerate(factors)]
        if max(abs(a - b) for a, b in zip(batch["sin"][row], want)) < 1e-4:
            return name
    return "?"


def max_diff(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))


def check_dca(results: dict[str, Any], cpu_error: str) -> None:
    """The engine's get_rope: the dual-chunk class with chunk and local, rope_theta alone, a CUDA-only device (its
    error on the CPU), the key table by hand, and a yarn section beside the key that changes nothing."""
    dca, beside, control = results["dca"], results["dca+yarn"], results["yarn"]
    for got in (dca, beside):
        assert got["kind"] == "DualChunkRotaryEmbedding", got
        assert (got["chunk_size"], got["local_size"], got["base"]) == (CHUNK, LOCAL, THETA), got
        assert cpu_error in got["plain_error"], got["plain_error"]
    cos, sin = dca_key_rows()
    assert max_diff(dca["k_cos"], cos) < 1e-4 and max_diff(dca["k_sin"], sin) < 1e-4
    assert beside["k_cos"] == dca["k_cos"] and beside["k_sin"] == dca["k_sin"]  # the yarn section changed nothing
    assert control["kind"] == "YaRNScalingRotaryEmbedding", control  # the control: without the key it is read


def tiny_qwen_1m(folder: Path, with_dca: bool = True) -> Path:
    """Qwen2.5-7B-Instruct-1M's config.json at tiny sizes (its RoPE and DCA keys as published)."""
    config = json.loads(QWEN_1M.read_text())
    config.update(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=256, max_window_layers=2)
    if not with_dca:
        config.pop("dual_chunk_attention_config")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in version.split(".")[:3] if n.isdigit())


def view_at(engines: list[dict[str, Any]], engine: str, version: str) -> dict[str, Any]:
    """ropectl's row (inspect --engines --json) for ``engine`` that covers release ``version``."""
    for view in engines:
        low, high = view["versions"]
        if view["engine"] == engine and _key(low) <= _key(version) and (high is None or _key(version) < _key(high)):
            return view
    raise AssertionError(f"no {engine} row covers {version}: {[v['reader'] for v in engines]}")
