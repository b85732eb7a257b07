"""The state that RoPE frequencies depend on, independent of any config schema."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

# YaRN's ramp ends (the paper's alpha/beta; transformers, vLLM and llama.cpp use the same defaults): the one home
# of these numbers, for the method registry, the frequencies, GGUF keys and llama.cpp flags.
YARN_DEFAULT_BETAS: Mapping[str, float] = {"beta_fast": 32.0, "beta_slow": 1.0}


@dataclass(frozen=True)
class RopeParams:
    """Everything needed to compute one rotary embedding's inverse frequencies.

    ``rope_type`` uses transformers' names (``default`` for unscaled RoPE; each scaling method module in
    ``ropectl.rope.methods`` names the type it owns); static NTK is ``default`` with a changed ``rope_theta``.
    ``scaling`` holds the type's own keys (``factor``, ``original_max_position_embeddings``, ``beta_fast`` ...), never
    ``rope_type``, ``type`` or ``rope_theta``. The factor a model uses where none is written is the registry's to
    say (``ropectl.rope.methods.effective_factor``): this module knows no method.
    """

    rope_type: str
    rope_theta: float
    rotary_dim: int
    max_position_embeddings: int | None
    scaling: Mapping[str, Any] = field(default_factory=dict)

    @property
    def factor(self) -> float | None:
        value = self.scaling.get("factor")
        return None if value is None else float(value)

    @property
    def original_max_position_embeddings(self) -> int | None:
        value = self.scaling.get("original_max_position_embeddings")
        return None if value is None else int(value)

    @property
    def trained_context(self) -> int | None:
        """The context length the model was pretrained at, as far as the config says."""
        return self.original_max_position_embeddings or self.max_position_embeddings

    def with_(self, **changes: Any) -> RopeParams:
        return replace(self, **changes)


@dataclass(frozen=True)
class Frequencies:
    """What a rotary embedding is built from: ``rotary_dim // 2`` inverse frequencies and the cos/sin scale."""

    inv_freq: tuple[float, ...]
    attention_factor: float
    effective_theta: float
