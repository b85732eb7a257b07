"""``inspect --engines``: each reader's view of a checkpoint, next to what ropectl reads from it.

ropectl's own reading (``ropectl.schema.read``) follows the newest transformers; every other reader is
compared with it, so a checkpoint that some engine or version would build differently (or not at all)
is named with the fix, instead of one reading being reported as the truth.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl.readers.parity import EngineView, disagreement_warnings, engine_views
from ropectl.rope.params import RopeParams
from ropectl.schema.read import ModelRope, text_config


def expected_of(model: ModelRope) -> dict[str, RopeParams]:
    return dict(model.layer_ropes) or {"main": model.rope}


def null_theta_warning(config: Mapping[str, Any]) -> str | None:
    """transformers 5 saves ``"rope_theta": null`` after ``config.rope_scaling = {...}`` on a config without it."""
    cfg = text_config(config)
    sections = [cfg.get("rope_parameters"), cfg.get("rope_scaling")]
    nested = [s for s in sections if isinstance(s, Mapping)]
    flat = [s for s in nested if "rope_theta" in s and s["rope_theta"] is None]
    top_null = "rope_theta" in cfg and cfg["rope_theta"] is None
    if not flat and not top_null:
        return None
    return ("rope_theta is null in config.json (transformers 5 saves that after `config.rope_scaling = {...}` on a "
            "config without rope_theta): transformers 5 cannot build the model and 4.x uses the default base, so "
            "the theta shown is a default, not the model's; set rope_theta to the model's base")


def engine_section(config: Mapping[str, Any], model: ModelRope, target: int | None) -> list[EngineView]:
    lengths = (None, target) if target else (None,)
    return engine_views(config, expected_of(model), lengths)


def engine_warnings(config: Mapping[str, Any], views: list[EngineView]) -> list[str]:
    out = [w for w in (null_theta_warning(config),) if w]
    return out + disagreement_warnings(views)
