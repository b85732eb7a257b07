"""The publishers' own facts that a config cannot say: a family's native (pretraining) context where
``max_position_embeddings`` holds something else, the long-context recipe its model card documents, and the card's
caveat. One TOML file a family in ``ropectl/families/cards/`` (a user adds one the same way, in the folder that
``ROPECTL_CARDS_DIR`` names); everything else (native context, presets, the caveat lines, docs' table) is derived.

A card is recognised from the config alone, since a local folder has no hub id: every key of its ``[match]`` table
must hold one of the listed values (looked up at the top level, in ``text_config``, then in the rope section, so a
GGUF matches through the config ropectl reads from its metadata). A config that matches the model type and some but
not all other keys, or two cards at once, keeps the config's own lengths and gets a note saying so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ropectl.errors import ConfigError

CARDS_ENV = "ROPECTL_CARDS_DIR"
SHIPPED = Path(__file__).resolve().parent / "cards"
_ROPE_SECTIONS = ("rope_parameters", "rope_scaling")


@dataclass(frozen=True)
class Recipe:
    """One extension the card documents, as data: what to write, the length to serve, and the card's own lines."""

    preset: str
    method: str
    factor: float
    original: int
    serve_length: int
    block: Mapping[str, Any]  # the card's rope_scaling JSON block, verbatim
    commands: Mapping[str, str] = field(default_factory=dict)  # engine -> the card's command line, verbatim
    sglang_overrides: Mapping[str, Any] | None = None  # the card's --json-model-override-args value

    def preset_table(self, card: Card) -> dict[str, Any]:
        """The ``[patch]`` table this recipe stands for (``--preset NAME``)."""
        return {"method": self.method, "factor": self.factor, "original_max_position_embeddings": self.original,
                "description": f"{card.title}: {self.method} x{self.factor:g} from {self.original:,} "
                               f"({card.source})"}


@dataclass(frozen=True)
class Caveat:
    text: str  # ropectl's one-line summary
    quote: str  # the card's sentence(s), verbatim
    methods: tuple[str, ...]  # the methods it concerns


@dataclass(frozen=True)
class Card:
    name: str
    title: str
    source: str  # the card's URL
    match: Mapping[str, tuple[Any, ...]]
    native_context: int | None = None
    native_note: str = ""
    recipes: tuple[Recipe, ...] = ()
    caveat: Caveat | None = None
    path: str = ""

    def caveat_for(self, method: str) -> Caveat | None:
        return self.caveat if self.caveat and method in self.caveat.methods else None


@dataclass(frozen=True)
class CardMatch:
    """The card a config is recognised as, or why none is used."""

    card: Card | None = None
    note: str | None = None  # a partial or ambiguous match: the config's own lengths are kept


def _lookup(config: Mapping[str, Any], key: str) -> Any:
    holders = [config, config.get("text_config")]
    holders += [h.get(s) for h in list(holders) if isinstance(h, Mapping) for s in _ROPE_SECTIONS]
    keys = (key, "type") if key == "rope_type" else (key,)  # transformers 4's rope_scaling spells it "type"
    for holder in holders:
        for name in keys:
            if isinstance(holder, Mapping) and holder.get(name) is not None:
                return holder[name]
    return None


def _equal(value: Any, wanted: Any) -> bool:
    if isinstance(wanted, (int, float)) and not isinstance(wanted, bool):
        try:
            return float(value) == float(wanted)
        except (TypeError, ValueError):
            return False
    return value == wanted


def _hits(card: Card, config: Mapping[str, Any]) -> dict[str, bool]:
    return {key: any(_equal(_lookup(config, key), w) for w in wanted) for key, wanted in card.match.items()}


def match_card(config: Mapping[str, Any], cards: tuple[Card, ...] | None = None) -> CardMatch:
    """The one card whose every match key holds, or a note for a partial or ambiguous match."""
    cards = all_cards() if cards is None else cards
    full, partial = [], []
    for card in cards:
        hits = _hits(card, config)
        if all(hits.values()):
            full.append(card)
        elif hits.get("model_type") and sum(hits.values()) > 1:
            partial.append((card, [k for k, ok in hits.items() if not ok]))
    own = [c for c in full if Path(c.path).parent != SHIPPED]
    full = own or full  # a card the user added wins over a shipped one that the same config matches
    if len(full) == 1:
        return CardMatch(full[0])
    if full:
        names = ", ".join(c.name for c in full)
        return CardMatch(None, f"the config matches several model cards ({names}): its own lengths are used")
    if partial:
        card, missed = partial[0]
        said = ", ".join(f"{k} {_lookup(config, k)!r} (card: {', '.join(map(str, card.match[k]))})" for k in missed)
        return CardMatch(None, f"the config resembles the {card.title} card but differs in {said}: "
                               "its own lengths are used")
    return CardMatch()


def native_context(config: Mapping[str, Any], card: Card | None) -> int | None:
    """``card``'s native context (the card ``match_card`` found for ``config``) where the config does not name its
    original length: a config that does names it itself, and a ropectl record of the unscaled base wins over both."""
    if card is None or not card.native_context or _lookup(config, "original_max_position_embeddings") is not None:
        return None
    return card.native_context


@lru_cache(maxsize=4)
def _load(folders: tuple[str, ...]) -> tuple[Card, ...]:
    cards: dict[str, Card] = {}
    for folder in folders:
        for path in sorted(Path(folder).glob("*.toml")):
            card = _parse(path)
            cards[card.name] = card  # a user's card of the same name replaces the shipped one
    return tuple(cards.values())


def all_cards() -> tuple[Card, ...]:
    extra = os.environ.get(CARDS_ENV)
    return _load((str(SHIPPED), *([extra] if extra else [])))


def by_name(name: str) -> Card | None:
    return next((c for c in all_cards() if c.name == name), None)


def recipe_presets() -> dict[str, tuple[Card, Recipe]]:
    return {r.preset: (c, r) for c in all_cards() for r in c.recipes}


def _parse(path: Path) -> Card:
    from ropectl.presets import load_toml_table

    data = load_toml_table(path, "card", "model card file")
    try:
        return _card(data, path)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"model card file '{path}' is malformed ({type(exc).__name__}: {exc})",
                          "see docs/reference/model-cards.md for the fields a card holds") from None


def _card(data: Mapping[str, Any], path: Path) -> Card:
    match = {k: tuple(v if isinstance(v, list) else [v]) for k, v in dict(data["match"]).items()}
    if "model_type" not in match:
        raise KeyError("match.model_type")
    native = data.get("native") or {}
    caveat = data.get("caveat")
    recipes = tuple(Recipe(
        preset=str(r["preset"]), method=str(r["method"]), factor=float(r["factor"]), original=int(r["original"]),
        serve_length=int(r["serve_length"]), block=dict(r["block"]), commands=dict(r.get("commands") or {}),
        sglang_overrides=r.get("sglang_overrides")) for r in data.get("recipe") or ())
    return Card(
        name=str(data["name"]), title=str(data["title"]), source=str(data["source"]), match=match,
        native_context=int(native["context"]) if native.get("context") else None,
        native_note=str(native.get("note", "")), recipes=recipes,
        caveat=Caveat(str(caveat["text"]), str(caveat.get("quote", "")), tuple(caveat["methods"])) if caveat else None,
        path=str(path))
