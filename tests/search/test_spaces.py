"""The search spaces, the pruning lengths and the ship rule: pure functions, checked against hand-computed values."""

from __future__ import annotations

import math

import pytest

from ropectl.errors import UsageError
from ropectl.rope.methods import get_method, parse_spec
from ropectl.search.fitness import Measured, Plan
from ropectl.search.report import compare, decide
from ropectl.search.run import pruning_lengths
from ropectl.search.spaces import FACTOR, build_space, values_of


@pytest.mark.parametrize("name", ["yarn", "llama3", "ntk"])
def test_every_point_of_a_space_is_a_method_every_command_accepts(name: str) -> None:
    space = build_space(name, 4.0)
    corners = [{b.name: (b.low if i & (1 << k) else b.high) for k, b in enumerate(space.bounds)}
               for i in range(2 ** len(space.bounds))]
    for point in [space.start(), *corners]:
        spec = space.spec(point)
        assert parse_spec(spec.label) == spec  # the printed spec reads back as the same method
        method = get_method(spec.name)
        if method.validate and spec.options:
            from ropectl.rope.methods import validate_options

            validate_options(method, dict(spec.options), 64)  # beta_slow < beta_fast, low < high: never violated


def test_the_start_is_the_closed_form_and_the_factor_is_fixed() -> None:
    yarn = build_space("yarn", 4.0)
    start = yarn.start()
    assert start["beta_fast"] == 32 and start["beta_slow"] == 1  # the method record's defaults
    assert start["attention_factor"] == pytest.approx(0.1 * math.log(4) + 1, abs=0.0025)  # on the 0.005 grid
    assert yarn.spec(start).factor == 4.0
    ntk = build_space("ntk", 2.0)
    assert [(b.name, b.low, b.high) for b in ntk.bounds] == [(FACTOR, 1.0, 4.0)]
    assert ntk.bounds[0].step == 0.5 and ntk.spec({FACTOR: 1.0}).name == "none"  # factor 1 is the model as trained
    assert values_of(ntk.spec({FACTOR: 2.5}), ntk) == {FACTOR: 2.5}


def test_grid_snapping() -> None:
    bound = build_space("ntk", 2.0).bounds[0]
    assert bound.grid(2.7) == 2.5 and bound.grid(9) == 4.0 and bound.grid(0) == 1.0


def test_pruning_lengths_are_above_the_trained_context_only() -> None:
    assert pruning_lengths((), 2048, 4096) == (3072, 4096)
    assert pruning_lengths((), 2048, 3000) == (3000,)
    assert pruning_lengths((2500,), 2048, 4096) == (2500, 4096)
    with pytest.raises(UsageError, match="in-window"):
        pruning_lengths((1024,), 2048, 4096)


def _measured(spec: str, per_doc: list[float], accuracy: float = 1.0, inside: float = 1.0) -> Measured:
    tokens = [100] * len(per_doc)
    return Measured(spec, True, {256: [inside * 100] * len(per_doc), 512: [x * 100 for x in per_doc]},
                    {256: tokens, 512: tokens}, 0.1, accuracy)


def test_beats_only_when_the_paired_interval_is_below_one() -> None:
    plan = Plan(256, 512, (512,), limit=math.log(math.e) + 0.01)  # in-window log PPL 1 is within the limit
    closed = _measured("yarn:2", [3.0, 3.2, 2.9, 3.1, 3.0, 3.05])
    better = _measured("yarn:2,beta_fast=16", [2.9, 3.05, 2.8, 3.0, 2.92, 2.96])
    at = compare(better, closed, 512)
    # hand-computed: the token-weighted mean log ratio is the mean of the per-doc differences
    assert math.log(at.ratio) == pytest.approx(sum(b - c for b, c in zip([2.9, 3.05, 2.8, 3.0, 2.92, 2.96],
                                                                           [3.0, 3.2, 2.9, 3.1, 3.0, 3.05])) / 6)
    assert decide(at, better, closed, plan)[:2] == (True, True)
    noisy = _measured("yarn:2,beta_fast=16", [2.5, 3.5, 2.6, 3.4, 2.9, 3.1])
    assert decide(compare(noisy, closed, 512), noisy, closed, plan)[:2] == (False, False)  # interval spans 1
    blind = _measured("yarn:2,beta_fast=16", [2.9, 3.05, 2.8, 3.0, 2.92, 2.96], accuracy=0.5)
    ships, beats, why = decide(compare(blind, closed, 512), blind, closed, plan)
    assert (ships, beats) == (False, True) and "needles" in why  # the niah guard


def test_engine_notes_say_where_yarn_betas_travel_as_flags() -> None:
    from ropectl.search.spaces import engine_notes

    (note,) = engine_notes("yarn", "model.gguf", "llama")
    assert "--yarn-beta-fast" in note and "--yarn-beta-slow" in note
    assert engine_notes("yarn", "model.gguf", "grok") == []  # an architecture llama.cpp reads the betas for
    assert engine_notes("yarn", "folder", "llama") == engine_notes("ntk", "model.gguf", "llama") == []
