"""``ropectl eval-ppl``: perplexity sweeps over lengths and RoPE scaling methods, weights loaded once."""

from ropectl.ppl.runner import Progress, SweepInterrupted, run_eval
from ropectl.ppl.spec import DEFAULTS, EvalSpec, build_spec, parse_length, parse_lengths
from ropectl.ppl.summary import EvalResult

__all__ = ["DEFAULTS", "EvalResult", "EvalSpec", "Progress", "SweepInterrupted", "build_spec", "parse_length",
           "parse_lengths", "run_eval"]
