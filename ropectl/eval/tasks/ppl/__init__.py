"""The ``ppl`` task (``ropectl eval-ppl``): perplexity sweeps over lengths and RoPE scaling methods."""

from ropectl.eval.progress import Progress
from ropectl.eval.tasks.ppl.runner import PplTask, run_eval
from ropectl.eval.tasks.ppl.spec import DEFAULTS, EvalSpec, build_spec
from ropectl.eval.tasks.ppl.summary import EvalResult

__all__ = ["DEFAULTS", "EvalResult", "EvalSpec", "PplTask", "Progress", "build_spec", "run_eval"]
