"""The config matrix's table: what every cell of tests/schema/test_config_matrix.py must do.

An outcome is ``WORKS`` (exit 0, nothing "unexpected"; ``Works(says=...)``: and stdout names these, as regular
expressions), or ``Refused(reason)``: one ``error: PROBLEM. Fix: FIX.`` line whose PROBLEM matches ``reason`` (a
case-insensitive regular expression on a stable fragment). ``Pending(after, bug)`` is a cell that does not do
``after`` today because of ``bug``: the test is a strict xfail, so the day the bug is fixed the cell passes, the
xfail fails, and the entry becomes ``after``.

The table is written as the cells must behave once issue 35 is closed. ``RULES`` is read top-down, the first rule
that matches a cell decides, and a cell no rule names must work. A rule's ``methods`` match the method's name
(``yarn`` matches ``yarn:32``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tests.helpers.config_matrix import AS_IS, PHI3, Cell


@dataclass(frozen=True)
class Works:
    says: tuple[str, ...] = ()


@dataclass(frozen=True)
class Refused:
    reason: str


@dataclass(frozen=True)
class Pending:
    after: Works | Refused
    bug: str


Outcome = Works | Refused | Pending
WORKS = Works()
ANY: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Rule:
    outcome: Outcome
    configs: frozenset[str] = ANY
    commands: frozenset[str] = ANY
    methods: frozenset[str] = ANY
    modes: frozenset[str] = ANY

    def matches(self, cell: Cell) -> bool:
        return all(not allowed or value in allowed for allowed, value in (
            (self.configs, cell.config), (self.commands, cell.command), (self.methods, cell.method.split(":")[0]),
            (self.modes, cell.mode)))


def _set(*items: str | Iterable[str]) -> frozenset[str]:
    return frozenset(x for item in items for x in ([item] if isinstance(item, str) else item))


# --- the configs, by what they ship (read from the JSON files, tests/fixtures/configs) ------------------------
PER_LAYER_ROPE = _set("gemma-3-1b-it", "gemma-3-4b-it")  # local and global layers rotate with different theta
SHIPS_LONGROPE = _set("phi-3.5-mini-instruct", "phi-4-mini-instruct")
EVAL = _set("eval-ppl", "eval-tasks")
DCA, LLAMA4, MINISTRAL3 = "qwen2.5-7b-instruct-1m", "llama-4-scout-17b-16e", "ministral-3-8b"

# --- the bugs the pending cells wait for -----------------------------------------------------------------------
LLAMA4_BANDS = ("llama3 x32 on Llama 4's own 1/1 bands (low = high = 1): patch writes it, but transformers' forward "
                "of the written 2-layer copy fails the matrix's check, and eval's rotary check finds transformers' "
                "inv_freq 31x off ropectl's (the 0/0 smoothing at low = high is read differently)")
RECOMMEND_CANDIDATES = ("found by this matrix: recommend's plan holds candidates the model's config refuses (yarn on "
                        "Phi-3's config, which takes default and longrope only; a shipped longrope or linear scaling "
                        "'needs --replace-existing', a flag recommend does not have)")

RULES: tuple[Rule, ...] = (
    # DCA: transformers has no dual chunk attention; vLLM and SGLang build their dual-chunk rotary embedding
    # whenever the key is set and drop rope_scaling (get_rope in both): patch refuses to write or emit any RoPE for
    # it, in one line that says so (docs/reference/families.md, Refusals).
    Rule(Refused(r"dual chunk attention"), configs=_set(DCA), commands=_set("patch", "emit")),
    # Refusals that are right: the method cannot be written for this model or engine.
    Rule(Refused(r"not p-rope"), methods=_set("proportional")),  # no p-RoPE model (Gemma 4) in the corpus
    Rule(Refused(r"phi3 config accepts only rope types"), configs=PHI3,
         methods=_set("linear", "dynamic", "yarn", "llama3")),
    Rule(Works(says=(r"dual.chunk.attention",)), configs=_set(DCA), commands=_set("inspect")),
    # Llama 4: llama3 with the model's own 1/1 bands works (transformers warns); llama.cpp takes no llama3 flags.
    Rule(Refused(r"llama\.cpp flags"), configs=_set(LLAMA4), commands=_set("emit"),
         modes=_set("llama.cpp"), methods=_set("llama3")),
    Rule(Pending(WORKS, LLAMA4_BANDS), configs=_set(LLAMA4), methods=_set("llama3"), commands=_set("patch"),
         modes=_set("output")),
    Rule(Pending(WORKS, LLAMA4_BANDS), configs=_set(LLAMA4), methods=_set("llama3"), commands=EVAL),
    Rule(WORKS, configs=_set(LLAMA4), methods=_set("llama3")),
    Rule(Works(says=(r"chunk", r"no.?rope|nope")), configs=_set(LLAMA4),
         commands=_set("inspect")),
    Rule(Refused(r"llama\.cpp flags"), commands=_set("emit"), modes=_set("llama.cpp"), methods=_set("llama3")),
    # (as-is too: SGLang's reading of Gemma 3's shipped per-layer sections is not measured)
    Rule(Refused(r"per-layer-type rope sections"), configs=PER_LAYER_ROPE, commands=_set("emit"),
         modes=_set("sglang"), methods=_set("yarn", "linear", "ntk", "dynamic", "llama3", AS_IS)),
    # SGLang merges the override into the shipped longrope section: rope_type default beside type longrope.
    Rule(Refused(r"sglang .*cannot serve this"), configs=SHIPS_LONGROPE, commands=_set("emit"), modes=_set("sglang"),
         methods=_set("ntk")),
    # Bugs.
    Rule(Pending(WORKS, RECOMMEND_CANDIDATES), configs=PHI3 | _set("gemma-3-4b-it"), commands=_set("recommend")),
)


def expected(cell: Cell) -> Outcome:
    return next((rule.outcome for rule in RULES if rule.matches(cell)), WORKS)
