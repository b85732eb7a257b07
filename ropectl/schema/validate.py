"""Type and range checks for the numbers config.json gives: one line naming the key and the fix.

config.json is untrusted input: a string where a number belongs, a negative head count, or a head_dim
of 1e12 must be refused here, before any arithmetic or allocation uses it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ropectl.errors import ConfigError
from ropectl.limits import MAX_FACTOR, MAX_HEAD_DIM, MAX_HEADS, MAX_POSITIONS, MAX_THETA, MIN_ROTARY_DIM
from ropectl.schema.layers import text_config


def number(key: str, value: Any, example: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"config.json '{key}' is {value!r}, not a number", f"set {key} to a number, e.g. {example}")
    number = float(value) if not isinstance(value, int) or abs(value) < 1 << 1000 else math.inf
    if not math.isfinite(number):
        raise ConfigError(f"config.json '{key}' is {value!r}, not a finite number",
                          f"set {key} to a finite number, e.g. {example}")
    return number


def config_int(key: str, value: Any, example: str, upper: int = MAX_POSITIONS) -> int:
    """A positive whole number no larger than ``upper``."""
    given = number(key, value, example)
    if given != int(given) or given < 1:
        raise ConfigError(f"config.json '{key}' is {value!r}, not a positive whole number",
                          f"set {key} to a positive whole number, e.g. {example}")
    if given > upper:
        raise ConfigError(f"config.json '{key}' is {value!r}, above the limit of {upper:,}",
                          f"set {key} to the model's real value, e.g. {example}")
    return int(given)


def head_dim(value: Any) -> int:
    return config_int("head_dim", value, "128", MAX_HEAD_DIM)


def heads(key: str, value: Any) -> int:
    return config_int(key, value, "32", MAX_HEADS)


def rope_theta(key: str, value: Any) -> float:
    theta = number(key, value, "10000")
    if not 1 < theta <= MAX_THETA:
        raise ConfigError(f"config.json '{key}' is {value!r}; a RoPE base must be above 1 and at most {MAX_THETA:g}",
                          f"set {key} to the model's base, e.g. 10000")
    return theta


def theta_or_default(value: Any, default: float, key: str = "rope_theta") -> float:
    """A given base, checked; the default only when the key is absent (0 is refused, never defaulted)."""
    return default if value is None else rope_theta(key, value)


def factor(value: Any) -> float:
    given = number("factor", value, "4")
    if not 0 < given <= MAX_FACTOR:
        raise ConfigError(f"rope scaling factor {value!r} is outside (0, {MAX_FACTOR:g}]",
                          "set factor to the context extension, a number above 1 such as 4")
    return given


def rotary_dim(value: int, head: int) -> int:
    if value < MIN_ROTARY_DIM:
        raise ConfigError(f"the rotary dimension is {value} (head_dim {head}); RoPE scaling needs at least "
                          f"{MIN_ROTARY_DIM // 2} frequency pairs", "check head_dim and partial_rotary_factor / rotary_dim")
    return value


def warnings_for(cfg: dict[str, Any] | Any, factor_value: float | None) -> list[str]:
    """What is legal but almost certainly not what the author meant."""
    out = []
    if not cfg.get("model_type"):
        out.append("config.json has no model_type: transformers cannot load this checkpoint (AutoConfig needs it); "
                   "add model_type, e.g. \"llama\"")
    if factor_value is not None and factor_value < 1:
        out.append(f"rope scaling factor {factor_value:g} is below 1: it shortens the context instead of extending it")
    return out


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
