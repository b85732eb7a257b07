"""How lm-evaluation-harness reads a checkpoint: transformers' RoPE, and the longest prompt it will score.

Read in lm-eval 0.4.13 (``lm_eval/models/utils.py`` ``resolve_max_length``, used by ``HFLM.max_length`` unless
``max_length`` is passed in ``--model_args``): the first of ``n_positions``, ``max_position_embeddings`` and
``n_ctx`` set in ``text_config`` (or the top-level config when there is none), then the tokenizer's
``model_max_length``, then 2048. Longer requests are left-truncated to it, silently, in every task (RULER included).
tests/compat/test_lm_eval.py loads patched models through ``HFLM`` and checks both.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from ropectl.readers.base import Quirk, Reader, Reading, VersionRange

ENGINE = "lm-eval"
LENGTH_KEYS = ("n_positions", "max_position_embeddings", "n_ctx")
DEFAULT_MAX_LENGTH = 2048
TRUNCATES = "truncates-to-max-position-embeddings"
SERVING = ("first of text_config's (else the config's) n_positions, max_position_embeddings, n_ctx; then the "
           f"tokenizer's model_max_length; then {DEFAULT_MAX_LENGTH}; longer requests are left-truncated")

READERS: tuple[Reader, ...] = (
    Reader(ENGINE, VersionRange("0.4.13"), ("max_position_embeddings",), (), {}, {}, SERVING, (
        Quirk(TRUNCATES, "takes max_position_embeddings as the longest prompt and left-truncates longer ones",
              fix="pass the length: lm_eval --model hf --model_args pretrained=MODEL,max_length=N"),
    ), ("0.4.13",)),
)


def max_length(config: Mapping[str, Any]) -> int | None:
    """What ``resolve_max_length`` takes from config.json (None: it falls through to the tokenizer)."""
    inner = config.get("text_config")
    cfg = inner if isinstance(inner, Mapping) and inner else config
    return next((int(cfg[k]) for k in LENGTH_KEYS if cfg.get(k) is not None), None)


def predict(reader: Reader, config: Mapping[str, Any], version: str | None = None) -> Reading:
    """lm-eval runs the model in the installed transformers (taken as the newest), up to ``max_length``."""
    from ropectl.readers import transformers as tf

    base = tf.predict(tf.READERS[-1], config)
    if not base.ok:
        return Reading(reader, error=base.error, notes=base.notes)
    # the config class default where config.json has none, as the loaded config carries it
    main = base.ropes.get("full_attention") or next(iter(base.ropes.values()), None)
    length = max_length(config) or (main.max_position_embeddings if main else None) or DEFAULT_MAX_LENGTH
    # it runs transformers, so the attention features are transformers' (readers.features)
    return Reading(reader, base.ropes, notes=base.notes, serving_length=length, attention=base.attention)


def command(model: str, target: int) -> str:
    """The lm-eval command line that scores prompts up to ``target`` tokens of ``model``."""
    args = f"pretrained={model},max_length={target}"
    return "lm_eval --model hf --model_args " + shlex.quote(args) + " --tasks TASKS"
