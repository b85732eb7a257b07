"""What a ``patch`` run is asked to do, built from presets, a TOML file, typed flags and ``--set``.

Precedence, lowest first: preset, ``--config FILE``, typed flags, ``--set key=value``. Everything is
validated here, so Python callers get the same errors as the CLI.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ropectl import presets
from ropectl.errors import MethodError, UsageError
from ropectl.rope.methods import MethodSpec, Param, get_method, parse_value
from ropectl.schema.write import check_schema

EMITS = ("config", "vllm", "llama.cpp")
PRESET_PREFIX = "patch-"
# Keys a preset / config file may hold besides the method's own options.
SPEC_KEYS = ("method", "factor", "target_length", "schema", "options", "longrope_file", "description")
_FACTOR = Param("factor", float)
_TARGET = Param("target_length", int)


@dataclass(frozen=True)
class PatchSpec:
    """One ``ropectl patch`` invocation, fully resolved."""

    model: str
    method: MethodSpec
    target_length: int | None = None
    output: Path | None = None
    in_place: bool = False
    dry_run: bool = False
    emit: str = "config"
    schema: str = "both"
    force: bool = False
    copy: bool = False
    replace_existing: bool = False

    def __post_init__(self) -> None:
        check_schema(self.schema)
        if self.emit not in EMITS:
            raise UsageError(f"unknown --emit '{self.emit}'", f"use one of: {', '.join(EMITS)}")
        writes = self.output is not None or self.in_place
        if self.output is not None and self.in_place:
            raise UsageError("--output and --in-place exclude each other", "pass only one of them")
        if self.emit != "config" and writes:
            raise UsageError(f"--emit {self.emit} prints flags and writes nothing", "drop --output / --in-place")
        if self.emit == "config" and not writes and not self.dry_run:
            raise UsageError("nowhere to write the patched model",
                             "pass --output DIR (or FILE.gguf), --in-place, --dry-run, or --emit vllm|llama.cpp")
        if self.target_length is not None and self.target_length <= 0:
            raise UsageError(f"--target-length must be positive, got {self.target_length}", "pass e.g. 32768")

    @property
    def writes(self) -> bool:
        return self.emit == "config" and not self.dry_run


def list_presets() -> list[str]:
    return presets.list_presets(PRESET_PREFIX)


def load_preset(name: str) -> dict[str, Any]:
    path = presets.preset_path(name, PRESET_PREFIX)
    if not path.is_file():
        known = ", ".join(list_presets()) or "none installed"
        raise UsageError(f"unknown preset '{name}'", f"use one of: {known}; or pass --config FILE.toml")
    return presets.load_toml_table(path, "patch", "preset")


def load_config_file(path: Path) -> dict[str, Any]:
    return presets.load_toml_table(path, "patch")


def read_longrope_file(path: Path) -> dict[str, list[float]]:
    """A JSON file with ``short_factor`` and ``long_factor`` lists (a config.json's rope section works too)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read longrope file '{path}' ({exc.strerror})", "check the path") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"longrope file '{path}' is not valid JSON ({exc})", "fix the JSON") from None
    if isinstance(data, dict):
        data = data.get("rope_scaling") or data.get("rope_parameters") or data
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in ("short_factor", "long_factor")):
        raise UsageError(f"longrope file '{path}' has no short_factor and long_factor lists",
                         'write {"short_factor": [...], "long_factor": [...]}')
    return {k: data[k] for k in ("short_factor", "long_factor")}


def parse_sets(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"malformed --set '{item}'", "write --set key=value, e.g. --set beta_fast=16")
        out[key.strip().replace("-", "_")] = value.strip()
    return out


@dataclass(frozen=True)
class MethodChoice:
    """The method part of a patch request, before presets and flags are merged."""

    method: str | None = None
    factor: float | None = None
    target_length: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    longrope_file: Path | None = None
    schema: str | None = None


def _from_table(table: Mapping[str, Any]) -> MethodChoice:
    method = table.get("method")
    options = dict(table.get("options") or {})
    for key, value in table.items():
        if key not in SPEC_KEYS:
            options[key] = value  # a method option written directly in the table
    path = table.get("longrope_file")
    factor = None if table.get("factor") is None else parse_value(_FACTOR, table["factor"])
    target = None if table.get("target_length") is None else parse_value(_TARGET, table["target_length"])
    return MethodChoice(method, factor, target, options, Path(path) if path else None, table.get("schema"))


def merge(*choices: MethodChoice) -> MethodChoice:
    """Later choices override earlier ones, key by key; a new method drops the old method's options.

    A factor given later replaces an earlier target length and vice versa (they are two ways to say one thing).
    """
    out = MethodChoice()
    for c in choices:
        options = dict(out.options) if c.method in (None, out.method) else {}
        options.update(c.options)
        factor, target = out.factor, out.target_length
        if c.factor is not None or c.target_length is not None:
            factor, target = c.factor, c.target_length
        out = MethodChoice(
            c.method or out.method,
            factor,
            target,
            options,
            c.longrope_file or out.longrope_file,
            c.schema or out.schema,
        )
    return out


def method_spec(choice: MethodChoice) -> MethodSpec:
    """A validated MethodSpec (options typed; factor/target consistency checked)."""
    if not choice.method:
        raise MethodError("no scaling method given", "pass --method (linear, ntk, dynamic, yarn, llama3, longrope) "
                                                     "or --preset NAME")
    method = get_method(choice.method)
    if choice.factor is not None and choice.target_length is not None:
        raise UsageError("both a factor and a target length are given", "pass only one of --factor / --target-length")
    options = dict(choice.options)
    if choice.longrope_file is not None:
        if method.name != "longrope":
            raise UsageError(f"--longrope-file applies to longrope, not {method.name}", "drop --longrope-file")
        options = {**read_longrope_file(choice.longrope_file), **options}
    typed = tuple((key, parse_value(method.param(key), value)) for key, value in options.items() if value is not None)
    factor = None if choice.factor is None else parse_value(_FACTOR, choice.factor)
    return MethodSpec(method.name, factor, typed)


def build_choice(
    preset: str | None = None, config_file: Path | None = None, flags: MethodChoice | None = None,
    sets: Sequence[str] = (),
) -> MethodChoice:
    layers = []
    if preset:
        layers.append(_from_table(load_preset(preset)))
    if config_file:
        layers.append(_from_table(load_config_file(config_file)))
    if flags:
        layers.append(flags)
    if sets:
        layers.append(_from_table(parse_sets(sets)))
    return merge(*layers)
