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
from ropectl.schema.read import ModelRope
from ropectl.schema.validate import null_theta_warning


def expected_of(model: ModelRope) -> dict[str, RopeParams]:
    return dict(model.layer_ropes) or {"main": model.rope}


def engine_section(config: Mapping[str, Any], model: ModelRope, target: int | None) -> list[EngineView]:
    lengths = (None, target) if target else (None,)
    return engine_views(config, expected_of(model), lengths)


def engine_warnings(config: Mapping[str, Any], views: list[EngineView]) -> list[str]:
    out = [w for w in (null_theta_warning(config),) if w]
    return out + disagreement_warnings(views)
