"""One timed forward of the model a sweep will load, for an estimate of the sweep's time before it runs.

The model is loaded through the sweeps' own loader, so inside ``reusing()`` the sweeps that follow use this
load and the probe costs two forwards (and an untimed short one first, which keeps one-time costs such as
kernel selection and allocator growth out of the timing).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Shape:
    """The two cost coefficients of a forward: weights used per token, and layers x heads x head size."""

    params: int
    attention: int

    def flops(self, n: int) -> float:
        """One causal forward of n tokens: 2 FLOPs per weight per token, plus QK^T and AV over the causal half
        of the n x n scores in every layer (2 x 2 x n^2 / 2 x heads x head size)."""
        return 2.0 * self.params * n + 2.0 * self.attention * n * n


@dataclass(frozen=True)
class Timing:
    """Two timed forwards, ``seconds`` for ``tokens`` tokens and ``short_s`` for ``short`` tokens, of a model of
    ``shape``: a forward of n tokens takes ``overhead + per_flop * shape.flops(n)``, the line through both."""

    seconds: float
    tokens: int
    short_s: float
    short: int
    shape: Shape

    @property
    def per_flop(self) -> float:
        extra = self.shape.flops(self.tokens) - self.shape.flops(self.short)
        slope = (self.seconds - self.short_s) / extra if extra > 0 else 0.0
        # timing noise can make the longer forward no slower: then all of it counts as compute, no overhead
        return slope if slope > 0 else self.seconds / self.shape.flops(self.tokens)

    @property
    def overhead(self) -> float:
        return max(0.0, self.short_s - self.per_flop * self.shape.flops(self.short))

    def estimate(self, forwards: list[tuple[int, int]]) -> float:
        """Seconds for ``forwards``, a list of (length, count)."""
        return math.fsum(count * (self.overhead + self.per_flop * self.shape.flops(n)) for n, count in forwards)


SHORT = 64  # the short forward: mostly the fixed cost of a forward (dispatch, the head's set-up)
LONG_MIN = 512  # the long one at least this long, so that compute, not the fixed cost, sets the slope


def timed_forward(model: str | None, device: str, dtype: str, tokens: int, engine_name: str = "transformers",
                  ) -> Timing:
    """PPL forwards (the engine's ``sequence_nll``) of ``tokens`` (at least LONG_MIN) and of SHORT tokens, timed, and
    the model's shape (from its torch module: an engine that screens has one)."""
    import torch

    from ropectl.eval.engines import get_engine
    from ropectl.eval.engines.requests import SequenceNLL
    from ropectl.runtime.model import method_states, model_source, resolve_device, resolve_dtype_choice

    where = resolve_device(device)
    source = model_source(model)
    engine = get_engine(engine_name)(source, where, resolve_dtype_choice(dtype, where)[0], None, "recommend")
    engine.load_tokenizer()
    engine.load()
    engine.activate(method_states(source.config, ())[0])
    vocab, shape = forward_shape(engine)

    def forward(n: int) -> None:
        engine.sequence_nll([SequenceNLL((torch.arange(n, dtype=torch.long) * 7919 % vocab).tolist())])
        if where.startswith("cuda"):
            torch.cuda.synchronize()

    tokens, short = max(tokens, LONG_MIN), SHORT
    forward(short)  # untimed: one-time costs
    return Timing(_seconds(forward, tokens), tokens, _seconds(forward, short), short, shape)


def forward_shape(engine: Any) -> tuple[int, Shape]:
    """(vocabulary size, Shape): an engine that holds no torch module says them itself (``forward_shape()``, the
    llama.cpp engine); otherwise they are read from its torch module."""
    own = getattr(engine, "forward_shape", None)
    if own is not None:
        vocab, params, attention = own()
        return vocab, Shape(params, attention)
    net = engine.model
    return net.get_input_embeddings().weight.shape[0], model_shape(net)


def _seconds(run: Any, n: int) -> float:
    start = time.perf_counter()
    run(n)
    return time.perf_counter() - start


def model_shape(net: Any) -> Shape:
    """Weights used per token (every parameter but the input embedding; the head counted once, tied or not)
    and layers x heads x head size from the text config."""
    embed = net.get_input_embeddings().weight
    output = net.get_output_embeddings()
    params = sum(p.numel() for p in net.parameters()) - embed.numel()
    if output is not None and output.weight is embed:  # tied: parameters() listed the shared matrix once
        params += embed.numel()
    cfg = net.config.get_text_config() if hasattr(net.config, "get_text_config") else net.config
    heads = getattr(cfg, "num_attention_heads", 0) or 0
    head_dim = getattr(cfg, "head_dim", None) or (cfg.hidden_size // heads if heads else 0)
    return Shape(int(params), int(getattr(cfg, "num_hidden_layers", 0) or 0) * heads * int(head_dim))
