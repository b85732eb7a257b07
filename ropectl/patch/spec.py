"""What a ``patch`` run is asked to do, built from presets, a TOML file, a spec string, typed flags and ``--set``.

Precedence, lowest first: preset, ``--config FILE``, ``-m`` spec, typed flags, ``--set key=value``; the
layering itself is :func:`ropectl.rope.choice.layer`, shared with ``eval-ppl``. Everything is validated
here, so Python callers get the same errors as the CLI.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ropectl import presets
from ropectl.errors import UsageError
from ropectl.families import cards
from ropectl.rope.choice import MethodChoice, layer, merge, to_method_spec
from ropectl.rope.methods import MethodSpec, as_is_name, get_method
from ropectl.schema.write import check_max_positions, check_schema

WRITE = "config"  # --emit config writes; every other --emit value is a serving reader's (readers.emitters)
PRESET_PREFIX = "patch-"
__all__ = ["WRITE", "MethodChoice", "emits", "PatchSpec", "build_choice", "load_config_file", "load_preset", "merge",
           "method_spec"]


@dataclass(frozen=True, kw_only=True)
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
    max_positions: str = "target"  # the write form of max_position_embeddings (schema.write.MAX_POSITION_FORMS)
    # verification runs a tiny copy's forward too (patch.forward): always from the CLI; the model-type sweep, which
    # patches every type with every method, runs it once per type
    forward: bool = True

    def __post_init__(self) -> None:
        check_schema(self.schema)
        check_max_positions(self.max_positions)
        if self.emit != WRITE and self.emit not in emits():
            raise UsageError(f"unknown --emit '{self.emit}'", f"use one of: {', '.join(emits())}")
        writes = self.output is not None or self.in_place
        if self.output is not None and self.in_place:
            raise UsageError("--output and --in-place exclude each other", "pass only one of them")
        if self.emit != "config" and writes:
            raise UsageError(f"--emit {self.emit} prints flags and writes nothing", "drop --output / --in-place")
        if self.emit != "config" and self.dry_run:  # refused, not ignored: --dry-run's diff would not be printed
            raise UsageError(f"--dry-run previews a config write, and --emit {self.emit} writes nothing (it prints "
                             "serving flags)", "drop --dry-run (or --emit to preview the config diff)")
        if get_method(self.method.name).keeps_checkpoint:
            self._check_kept(writes)
        if self.emit == "config" and not writes and not self.dry_run:
            raise UsageError("nowhere to write the patched model",
                             "pass --output DIR (or FILE.gguf), --in-place, --dry-run, or --emit vllm|llama.cpp")
        if self.target_length is not None and self.target_length <= 0:
            raise UsageError(f"--target-length must be positive, got {self.target_length}", "pass e.g. 32768")

    def _check_kept(self, writes: bool) -> None:
        """The checkpoint as it is (as-is) writes nothing and has its own length."""
        name = self.method.name
        if writes:
            raise UsageError(f"-m {name} keeps the checkpoint as it is: there is nothing to write",
                             "serve the checkpoint itself (patch MODEL --emit vllm|sglang|llama.cpp prints its line), "
                             "or name a method to write")
        if self.target_length is not None:
            raise UsageError(f"-m {name} serves the checkpoint at the context its config ships, so a target length "
                             "does not apply", "drop --target-length, or name a method that scales to it")

    @property
    def writes(self) -> bool:
        return self.emit == "config" and not self.dry_run


def emits() -> tuple[str, ...]:
    """``--emit`` values: ``config`` (write), then each serving reader that prints a line."""
    from ropectl.readers import emitters

    return (WRITE, *emitters())


def list_presets() -> list[str]:
    """The TOML presets in configs/ and one per model-card recipe (``ropectl.families.cards``)."""
    return sorted({*presets.list_presets(PRESET_PREFIX), *cards.recipe_presets()})


def load_preset(name: str) -> dict[str, Any]:
    recipe = cards.recipe_presets().get(name.removeprefix(PRESET_PREFIX).removesuffix(".toml"))
    if recipe is not None:
        card, entry = recipe
        return entry.preset_table(card)
    path = presets.preset_path(name, PRESET_PREFIX)
    if not path.is_file():
        known = ", ".join(list_presets()) or "none installed"
        raise UsageError(f"unknown preset '{name}'", f"use one of: {known}; or pass --config FILE.toml")
    return presets.load_toml_table(path, "patch", "preset")


def load_config_file(path: Path) -> dict[str, Any]:
    return presets.load_toml_table(path, "patch")


def method_spec(choice: MethodChoice, emit: str = WRITE) -> MethodSpec:
    """A validated MethodSpec (a --longrope-file's lists are read by ``rope.choice.to_method_spec``). ``--emit ENGINE``
    with nothing of a method given serves the checkpoint as it is (``as-is``): its own shipped scaling."""
    if emit != WRITE and choice == MethodChoice(schema=choice.schema):
        choice = replace(choice, method=as_is_name())
    return to_method_spec(choice)


def build_choice(
    preset: str | None = None, config_file: Path | None = None, flags: MethodChoice | None = None,
    sets: Sequence[str] = (), spec: str | None = None,
) -> MethodChoice:
    """Read the preset and --config file, then layer them with the spec string, flags and --set."""
    return layer(load_preset(preset) if preset else None, load_config_file(config_file) if config_file else None,
                 spec, flags, sets)
