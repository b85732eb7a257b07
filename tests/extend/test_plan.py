"""extend's plan on a fixed time model (SmolLM2-135M's shape at 8 s per 2k-token forward, about 2 CPU cores), so
that the shares are exact: a stage set to ``never`` gives its share to acceptance, and a zero-shot sweep that stays
over its share at its smallest is said, not hidden in the total."""

from __future__ import annotations

from pathlib import Path

import pytest

from ropectl.errors import UsageError
from ropectl.eval.timing import Shape, Timing
from ropectl.extend.plan import make_plan
from ropectl.extend.spec import ExtendSpec
from tests.helpers.report_engine import tiny_base

SLOW = Timing(8.0, 2048, 0.5, 64, Shape(134_515_008, 17_280))
ARGS = {"target": 4096, "factor": 2.0, "samples": 2, "tasks": ("niah_single_1",), "dtype": "fp32", "device": "cpu",
        "search": "never", "finetune": "never"}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_base(tmp_path_factory.mktemp("plan") / "base", 2048)


def plan(base: Path, budget: float | None, **kw: object):  # noqa: ANN201
    import json

    config = json.loads((base / "config.json").read_text())
    spec = ExtendSpec(model=str(base), out=base.parent / "out", budget_min=budget, **{**ARGS, **kw})
    return make_plan(spec, config, 2048, SLOW, "fp32", "cpu")


def zero_cut(p) -> list[str]:  # noqa: ANN001
    return [c for c in p.cut if c.startswith("zero-shot:")]


def test_a_zero_shot_sweep_over_its_share_is_said(base: Path) -> None:
    whole = plan(base, None)
    accept, zero = (whole.stage(n).minutes for n in ("acceptance", "zero-shot"))
    # search and finetune never: acceptance holds 85 % of the budget, zero-shot 15 %
    budget = accept / 0.85 * 1.01
    assert zero > 0.15 * budget  # the case: acceptance fits whole, zero-shot cannot
    tight = plan(base, budget)
    (line,) = zero_cut(tight)
    assert f"~{tight.stage('zero-shot').minutes:.0f} min" in line and "runs whole" in line
    assert "-f" not in line  # -f given: no advice to pass it
    assert zero_cut(plan(base, zero / 0.15 * 1.01)) == []  # the control: a budget whose share holds the sweep


def test_the_budget_refusal_names_the_share_acceptance_holds(base: Path) -> None:
    """The minimum is acceptance's smallest over its share: 85 % with search and finetune never, 30 % with both
    auto (their shares kept for them), so the two minimums stand in the ratio 85 : 30."""
    minimum = {}
    for gate in ("never", "auto"):
        with pytest.raises(UsageError) as refused:
            plan(base, 0.01, samples=None, search=gate, finetune=gate)
        text = str(refused.value)
        assert f"its share, {85 if gate == 'never' else 30}%" in text, text
        minimum[gate] = float(text.split("at least ", 1)[1].split(" min", 1)[0])
    assert minimum["never"] / minimum["auto"] == pytest.approx(30 / 85, rel=0.02)


def test_a_stage_set_to_never_is_one_word_in_the_plan(base: Path) -> None:
    from ropectl.extend.plan import plan_lines

    lines = plan_lines(plan(base, None))
    assert "  search      never" in lines and "  finetune    never" in lines
    auto = plan_lines(plan(base, None, search="auto", finetune="auto"))  # the control: sized where it may run
    assert any(line.startswith("  search      auto  trials") for line in auto), auto
