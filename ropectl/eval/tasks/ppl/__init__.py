"""The ``ppl`` task (``ropectl eval-ppl``): perplexity sweeps over lengths and RoPE scaling methods."""

from ropectl.eval.interrupt import SweepInterrupted
from ropectl.eval.progress import Progress
from ropectl.eval.settings import parse_length, parse_lengths
from ropectl.eval.tasks.ppl.runner import PplTask, run_eval
from ropectl.eval.tasks.ppl.spec import DEFAULTS, EvalSpec, build_spec
from ropectl.eval.tasks.ppl.summary import EvalResult

__all__ = ["DEFAULTS", "EvalResult", "EvalSpec", "PplTask", "Progress", "SweepInterrupted", "build_spec",
           "parse_length", "parse_lengths", "run_eval"]
