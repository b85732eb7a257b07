"""A scaling-method choice layered from every place a user can give one: the one engine ``patch`` and ``eval-ppl`` share.

Layers, lowest first: a preset table, a ``--config`` table, a spec string (``yarn:4,beta_fast=16``), typed flags,
``--set key=value``. A later layer overrides an earlier one key by key; an option a layer does not give keeps
the lower layer's value. The last three are all typed on one command line, so none of them is a default for
another: where two of them set one thing to different values (``-m yarn:4 -f 8``, or a spec's factor and a
target length) the choice is refused, naming both. Pure but for one file: tables come in already read; the
JSON file of a method's list options (``-m longrope:4,file=F`` or ``--longrope-file F``) is read when the
choice becomes a MethodSpec (:func:`to_method_spec`, through ``rope.methods.resolve_file``, the one reader).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ropectl.errors import MethodError, UsageError
from ropectl.rope.methods import (
    Method,
    MethodSpec,
    Param,
    first_where,
    get_method,
    method_names,
    parse_spec,
    parse_value,
    resolve_file,
)

# Keys a preset / config table may hold besides the method's own options.
SPEC_KEYS = ("method", "factor", "target_length", "schema", "options", "longrope_file", "description")
_FACTOR = Param("factor", float)
_TARGET = Param("target_length", int)


@dataclass(frozen=True)
class MethodChoice:
    """One layer (or the merged result): what is set, and nothing else (None / absent = not given here)."""

    method: str | None = None
    factor: float | None = None
    target_length: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    longrope_file: Path | None = None
    schema: str | None = None


def from_table(table: Mapping[str, Any]) -> MethodChoice:
    """A ``[patch]`` table (preset or --config file), an eval preset's method table, or parsed ``--set`` pairs."""
    method = table.get("method")
    options = dict(table.get("options") or {})
    for key, value in table.items():
        if key not in SPEC_KEYS:
            options[key] = value  # a method option written directly in the table
    path = table.get("longrope_file")
    factor = None if table.get("factor") is None else parse_value(_FACTOR, table["factor"])
    target = None if table.get("target_length") is None else parse_value(_TARGET, table["target_length"])
    return MethodChoice(None if method is None else str(method), factor, target, options,
                        Path(path) if path else None, table.get("schema"))


def from_spec(text: str) -> MethodChoice:
    """``name[:factor][,key=value...]`` through the registry's parser."""
    if not str(text).strip():
        raise UsageError("empty method spec", "write name[:factor][,key=value...], e.g. yarn:4")
    spec = parse_spec(str(text))
    return MethodChoice(spec.name, spec.factor, None, dict(spec.options), None if spec.file is None else Path(spec.file))


def from_sets(items: Sequence[str]) -> MethodChoice:
    """``--set key=value`` items (dashes in keys read as underscores)."""
    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"malformed --set '{item}'", "write --set key=value, e.g. --set beta_fast=16")
        out[key.strip().replace("-", "_")] = value.strip()
    return from_table(out)


def merge(*choices: MethodChoice) -> MethodChoice:
    """Later choices override earlier ones, key by key; a different method drops the old method's options.

    A factor given later replaces an earlier target length and vice versa (they are two ways to say one thing).
    """
    out = MethodChoice()
    for c in choices:
        same = c.method is None or out.method is None or get_method(c.method).name == get_method(out.method).name
        options = {**(dict(out.options) if same else {}), **{k: v for k, v in c.options.items() if v is not None}}
        factor, target = out.factor, out.target_length
        if c.factor is not None or c.target_length is not None:
            factor, target = c.factor, c.target_length
        out = MethodChoice(c.method or out.method, factor, target, options, c.longrope_file or out.longrope_file,
                           c.schema or out.schema)
    return out


def layer(preset: Mapping[str, Any] | None = None, config: Mapping[str, Any] | None = None,
          spec: str | None = None, flags: MethodChoice | None = None, sets: Sequence[str] = ()) -> MethodChoice:
    """THE layering: preset, --config, spec string, flags, --set (each optional), lowest first."""
    layers = []
    if preset is not None:
        layers.append(from_table(preset))
    if config is not None:
        layers.append(from_table(config))
    typed: list[tuple[str, MethodChoice]] = []  # the command line's layers, each with how the user wrote it
    if spec is not None:
        typed.append((f"-m {spec}", from_spec(spec)))
    if flags is not None:
        typed.append(("", flags))
    if sets:
        typed.append(("--set", from_sets(sets)))
    merged = merge(*layers, *(c for _, c in typed))
    check_agree(typed, merged.method)
    return merged


def check_agree(typed: Sequence[tuple[str, MethodChoice]], method: str | None) -> None:
    """Refuse two command-line layers that set one thing to different values; equal values are fine."""
    seen: dict[str, tuple[str, Any]] = {}
    for where, choice in typed:
        for key, value in _settings(choice):
            said = _said(where, key, value)
            if key in seen and not _same(key, seen[key][1], value, method):
                raise UsageError(f"{seen[key][0]} and {said} give two values of {key} ({_shown(seen[key][1])} and "
                                 f"{_shown(value)})", f"give {key} once (keep one of them)")
            seen.setdefault(key, (said, value))
    if "factor" in seen and "target_length" in seen:
        raise UsageError(f"{seen['factor'][0]} gives a factor and {seen['target_length'][0]} a target length "
                         "(two ways to say one thing)", "pass only one of them")


def _settings(choice: MethodChoice) -> Iterator[tuple[str, Any]]:
    if choice.method is not None:
        yield "method", get_method(choice.method).name
    if choice.factor is not None:
        yield "factor", choice.factor
    if choice.target_length is not None:
        yield "target_length", choice.target_length
    if choice.longrope_file is not None:
        yield "longrope_file", str(choice.longrope_file)
    yield from ((k, v) for k, v in choice.options.items() if v is not None)


def _said(where: str, key: str, value: Any) -> str:
    """How the user wrote it: the spec as typed, ``--set key=value``, or the typed flag."""
    if where.startswith("-m"):
        return where
    if where == "--set":
        return f"--set {key}={_shown(value)}"
    return f"--{key.replace('_', '-')} {_shown(value)}"


def _shown(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(_shown(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _same(key: str, a: Any, b: Any, method: str | None) -> bool:
    """Equal once typed as the registry types the key (``--set beta_fast=16`` equals ``--beta-fast 16``)."""
    param = {"factor": _FACTOR, "target_length": _TARGET}.get(key)
    try:
        if param is None and key != "method":
            param = get_method(method).param(key) if method else None
        if param is not None:
            a, b = parse_value(param, a), parse_value(param, b)
    except (MethodError, UsageError):  # a malformed value is refused later, by the key's own check
        return str(a) == str(b)
    return bool(a == b)


def to_method_spec(choice: MethodChoice) -> MethodSpec:
    """A validated MethodSpec: options typed by the registry, factor and target length not both given; a named
    factors file's lists sit under the options given any other way, and the spec's label names the file."""
    if not choice.method:
        raise MethodError("no scaling method given", f"pass --method ({method_names(where=lambda m: m.uses_factor)}) "
                                                     "or --preset NAME")
    method = get_method(choice.method)
    if choice.factor is not None and choice.target_length is not None:
        raise UsageError("both a factor and a target length are given", "pass only one of --factor / --target-length")
    _check_file(choice, method)
    if choice.factor is not None and not method.uses_factor:  # it would be dropped without a word
        raise UsageError(f"method '{method.name}' takes no factor (given {_shown(choice.factor)})",
                         f"drop the factor, or name a method that scales ({method_names(where=lambda m: m.uses_factor)})")
    typed = tuple((key, parse_value(method.param(key), value)) for key, value in choice.options.items()
                  if value is not None)
    factor = None if choice.factor is None else parse_value(_FACTOR, choice.factor)
    file = None if choice.longrope_file is None else str(choice.longrope_file)
    return resolve_file(MethodSpec(method.name, factor, typed, file))


def _check_file(choice: MethodChoice, method: Method) -> None:
    if choice.longrope_file is not None and not method.factors_file:
        owner = first_where(lambda m: bool(m.factors_file))
        raise UsageError(f"a factors file applies to {owner.name}, not {method.name}",
                         "drop --longrope-file (or file=) for this method")
