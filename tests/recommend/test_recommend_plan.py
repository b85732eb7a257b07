"""recommend's plan before the sweeps: counts against a hand count of the grid, the time model against the formula
written here apart from the code, the budget's sizes, and the power statements against hand-computed sample sizes.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ropectl.eval.timing import Shape, Timing, model_shape
from ropectl.recommend.plan import MIN_DOCS, MIN_SAMPLES, Plan, fit_budget, plan_lines, ppl_ratio, spread, task_difference
from ropectl.recommend.run import Request, plan_grid

Z975, Z80 = 1.959963984540054, 0.8416212335729143  # normal quantiles (published tables)
T80_5, T975_5 = 0.9195438, 2.5705818  # Student t, 5 degrees of freedom (published tables)


def test_plan_counts_by_hand(tiny_model: Path) -> None:
    """Trained 256, target 1k: factors 4 x (1, 1.5, 2) = 4, 6, 8 for 4 candidates, plus none = 13 methods;
    lengths 64 (the screen: trained / 4), 256, 1k; 8 documents; 5 tasks x 25 samples at 1k."""
    plan, skipped, trained = plan_grid(Request(model=str(tiny_model), target=1024, serve_with=("transformers",)))
    assert trained == 256 and not skipped
    lines = plan_lines(plan, None)
    assert "a screen of 104 cells (13 methods x 8 documents at 64)" in lines[0]  # 13 x 8
    assert "up to 312 PPL cells (13 x 8 documents x 64, 256, 1k)" in lines[0]  # 13 x 3 x 8
    assert "up to 1625 task trials (13 x 5 tasks x 25 samples at 1k)" in lines[0]  # 13 x 5 x 25
    # served by vLLM / llama.cpp: dynamic is not measured (3 factors), 10 methods
    plan, skipped, _ = plan_grid(Request(model=str(tiny_model), target=1024, serve_with=("vllm", "llama.cpp")))
    assert sorted(skipped) == ["dynamic:4", "dynamic:6", "dynamic:8"]
    assert "a screen of 80 cells" in plan_lines(plan, None)[0] and "up to 1250 task trials" in plan_lines(plan, None)[0]
    # one factor (-f 2): none and 4 candidates
    plan, _, _ = plan_grid(Request(model=str(tiny_model), target=1024, factor=2.0, serve_with=("transformers",)))
    assert plan.methods == ("none", "yarn:2", "ntk:2", "linear:2", "dynamic:2")


def _by_hand(short_s: float, long_s: float, short: int, long: int, p: int, a: int, n: int) -> float:
    """t(n) = t0 + k (2 p n + 2 a n^2), through (short, short_s) and (long, long_s)."""
    def f(m: int) -> float:
        return 2 * p * m + 2 * a * m * m

    k = (long_s - short_s) / (f(long) - f(short))
    return (short_s - k * f(short)) + k * f(n)


@pytest.mark.parametrize(("p", "a"), [(1_000_000, 0), (1_000_000, 5_000), (0, 1_000)])
def test_time_model_is_the_stated_formula(p: int, a: int) -> None:
    timing = Timing(seconds=3.0, tokens=2048, short_s=0.25, short=64, shape=Shape(p, a))
    for n in (64, 2048, 10240):
        assert timing.estimate([(n, 1)]) == pytest.approx(_by_hand(0.25, 3.0, 64, 2048, p, a, n), rel=1e-12)
    assert timing.estimate([(10240, 3), (4096, 2)]) == pytest.approx(
        3 * _by_hand(0.25, 3.0, 64, 2048, p, a, 10240) + 2 * _by_hand(0.25, 3.0, 64, 2048, p, a, 4096), rel=1e-12)


def test_pure_compute_scales_linearly_then_quadratically() -> None:
    """Negative control on the quadratic term: with no fixed cost, 5x the tokens costs 5x (no attention) and
    25x (attention only)."""
    linear = Timing(2.0, 2048, 2.0 * 64 / 2048, 64, Shape(1000, 0))
    quadratic = Timing(2.0, 2048, 2.0 * (64 / 2048) ** 2, 64, Shape(0, 1000))
    assert linear.estimate([(10240, 1)]) == pytest.approx(10.0) and linear.overhead == pytest.approx(0.0, abs=1e-12)
    assert quadratic.estimate([(10240, 1)]) == pytest.approx(50.0)


def test_model_shape_against_transformers(tiny_model: Path) -> None:
    """Weights per token: transformers' own count without embeddings, plus the head when tied (counted there
    as the embedding); attention term: layers x heads x head_dim of the tiny Llama (2 x 8 x 16)."""
    from transformers import AutoModelForCausalLM

    net = AutoModelForCausalLM.from_pretrained(tiny_model)
    head = net.get_output_embeddings().weight
    tied = head is net.get_input_embeddings().weight
    shape = model_shape(net)
    assert shape.params == net.num_parameters(exclude_embeddings=True) + (head.numel() if tied else 0)
    assert shape.attention == 2 * 8 * 16


GENERIC = Plan(("none", "yarn:4", "ntk:4", "linear:4"), (2048, 8192, 10240), 8,
               ("niah_single_1", "niah_multikey_2", "niah_multivalue", "vt", "fwe"), 25, (10240,), 2048)
SLOW = Timing(8.0, 2048, 0.5, 64, Shape(134_515_008, 17_280))  # about SmolLM2-135M on 2 CPU cores


def test_budget_cuts_docs_and_samples_and_says_the_power() -> None:
    full = SLOW.estimate(GENERIC.forwards())
    fitted = fit_budget(GENERIC, SLOW, full / 3)
    assert MIN_DOCS <= fitted.docs < 8 and MIN_SAMPLES <= fitted.samples < 25
    assert SLOW.estimate(fitted.forwards()) <= full / 3
    lines = plan_lines(fitted, SLOW, GENERIC, full / 3)
    assert any(f"{fitted.docs} documents (of 8), {fitted.samples} samples per task (of 25)" in ln for ln in lines)
    assert any(ln.startswith(f"power: {fitted.samples} trials per task separate") for ln in lines)
    assert not any(ln.startswith("warning") for ln in lines)


def test_a_budget_the_generic_sizes_fit_keeps_them() -> None:
    """A fast device (here 1000x the CPU's speed) keeps 8 documents and 25 samples."""
    fast = Timing(0.008, 2048, 0.0005, 64, SLOW.shape)
    assert fit_budget(GENERIC, fast, 30 * 60) == GENERIC


def test_a_budget_too_small_warns_at_the_smallest_sizes() -> None:
    fitted = fit_budget(GENERIC, SLOW, 1.0)
    assert (fitted.docs, fitted.samples) == (MIN_DOCS, MIN_SAMPLES)
    assert any(ln.startswith("warning: the smallest sizes") for ln in plan_lines(fitted, SLOW, GENERIC, 1.0))


def _mcnemar_trials(delta: float) -> int:
    """Connor (1987) with every discordant pair one way (p10 = delta, p01 = 0), and the exact test's 6 pairs."""
    connor = (Z975 * math.sqrt(delta) + Z80 * math.sqrt(delta - delta * delta)) ** 2 / delta ** 2
    return max(math.ceil(connor - 1e-9), math.ceil(6 / delta - 1e-9))


@pytest.mark.parametrize("n", [6, 10, 25, 100])
def test_task_difference_is_the_smallest_that_separates(n: int) -> None:
    delta = task_difference(n)
    assert delta is not None and _mcnemar_trials(delta) <= n
    assert delta == 0.01 or _mcnemar_trials(round(delta - 0.01, 2)) > n  # one step smaller does not


def test_no_task_difference_below_six_trials() -> None:
    assert task_difference(5) is None  # 5 pairs all one way: p = 0.0625


def test_ppl_ratio_by_hand() -> None:
    """6 documents (5 df): the paired t separates d when 6 >= ((t_.975 + t_.8) sd / d)^2, so the boundary is
    d = (2.5706 + 0.9195) sd / sqrt(6). Fewer than 6 documents never separate on the PPL ratio alone."""
    sd = 0.01
    assert ppl_ratio(6, sd) == pytest.approx(math.exp((T975_5 + T80_5) * sd / math.sqrt(6)), rel=1e-4)
    assert ppl_ratio(5, sd) is None and ppl_ratio(1, sd) is None and ppl_ratio(6, 0.0) is None


class _Cell:
    def __init__(self, method: str, doc: str, nll: float, length: int = 64) -> None:
        self.method, self.doc, self.nll_sum, self.tokens, self.length = method, doc, nll, 10, length


def test_spread_by_hand() -> None:
    """Per-token log ratios against none: a: 0.1, 0.3 (sd 0.1414); b: 0, 0, 0.3 (sd 0.1732); median of two: their
    mean. A cell at another length is ignored."""
    cells = [_Cell("none", "d1", 10), _Cell("none", "d2", 20), _Cell("none", "d3", 30),
             _Cell("a", "d1", 11), _Cell("a", "d2", 23), _Cell("b", "d1", 10), _Cell("b", "d2", 20),
             _Cell("b", "d3", 33), _Cell("b", "d3", 99, length=128)]
    assert spread(cells, 64) == pytest.approx((math.sqrt(0.02) + math.sqrt(0.03)) / 2)
