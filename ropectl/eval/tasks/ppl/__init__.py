"""``ropectl eval-ppl``: perplexity sweeps over lengths and RoPE scaling methods, weights loaded once."""

from ropectl.eval.options import parse_length, parse_lengths
from ropectl.eval.tasks.ppl.runner import Progress, SweepInterrupted, run_eval
from ropectl.eval.tasks.ppl.spec import DEFAULTS, EvalSpec, build_spec
from ropectl.eval.tasks.ppl.summary import EvalResult

__all__ = ["DEFAULTS", "EvalResult", "EvalSpec", "Progress", "SweepInterrupted", "build_spec", "parse_length",
           "parse_lengths", "run_eval"]
