"""A run's plan from its spec and the model's config, before any weight loads: the patched config (through the one
patch path), lengths, batch layout, tokens per step, and memory / time estimates for ``--dry-run``.

Memory estimate (bytes): fp32 weights (4 x params; training keeps fp32 master weights, bf16 runs under autocast),
fp32 gradients and AdamW's two moments for the trainable parameters (12 x trainable), the layer inputs gradient
checkpointing keeps (layers x batch x length x hidden), one layer's recomputed activations, and one loss chunk's
logits, and with a document mask (``--doc-mask`` or ``--short-mix``) the [batch, 1, T, T] mask in the compute dtype
plus its two boolean temporaries. Under FSDP (``shards`` processes) the weights, gradients and moments are divided
among the processes, and each holds the units it has gathered: two decoder layers (the one running and the one
prefetched) and the head. It is an estimate to compare PoSE with full-length training, not a bound (about +-50 %).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ropectl.errors import MethodError, UsageError
from ropectl.finetune.positions import span_length
from ropectl.finetune.spec import DEFAULT_SEQUENCES, FinetuneSpec
from ropectl.rope.methods import get_method


@dataclass(frozen=True)
class Shape:
    """The model dimensions the estimates need (from config.json)."""

    params: int
    layers: int
    hidden: int
    intermediate: int
    vocab: int
    attention_width: int  # heads x head_dim


@dataclass(frozen=True)
class RunPlan:
    trained: int
    target: int
    window: int  # PoSE's window; the target for --full
    seq_len: int
    span: int
    world: int
    per_device: int
    grad_accum: int
    steps: int
    warmup: int
    method: str  # the spec as applied (a target length turned into its factor)
    config: dict[str, Any]  # the patched config dict, with ropectl's record

    @property
    def global_batch(self) -> int:
        return self.per_device * self.world * self.grad_accum

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len

    @property
    def total_tokens(self) -> int:
        return self.tokens_per_step * self.steps

    def line(self) -> str:
        return plan_line(self.method, self.trained, self.target, self.window)

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k != "config"}
        out.update(global_batch=self.global_batch, tokens_per_step=self.tokens_per_step, total_tokens=self.total_tokens)
        return out


def plan_line(method: str, trained: int, target: int, window: int) -> str:
    """What a run trains, in the words of its first progress line, its dry run and its summary alike: the model's
    trained context, the target, and the window (PoSE) or full length it trains at."""
    how = f"PoSE window {window:,}" if window < target else "full length"
    return f"{method}: trained {trained:,} -> target {target:,} tokens; {how}"


def make_plan(spec: FinetuneSpec, config: Mapping[str, Any], trained: int | None, world: int = 1) -> RunPlan:
    """Patch ``config`` as ``ropectl patch`` would and lay out the run; every refusal that needs the config."""
    from ropectl.schema.apply import plan_config

    method = get_method(spec.method.name)
    if method.inference_only:
        raise MethodError(f"cannot fine-tune with {method.name}: {method.inference_only}",
                          "fine-tune with a method that writes one fixed RoPE: yarn, ntk or linear (a dynamic model "
                          "can still be served with dynamic afterwards)")
    patched = plan_config(config, spec.method, spec.target_length, "both")
    trained = trained or patched.trained_context
    target = patched.target_context
    if not trained or not target:
        raise UsageError("the model's trained context is unknown, so the target cannot be checked",
                         "pass a model whose config names max_position_embeddings")
    _check_target(trained, target, method.unscaled)
    window = target if not spec.pose else (spec.window or trained)
    if spec.pose and window >= target:
        raise UsageError(f"the PoSE window ({window:,} tokens) is not shorter than the target ({target:,}): no "
                         "position would be skipped", "pass a smaller --window, or --full to train at the target")
    seq_len = window
    span = span_length(window, target) if spec.pose else target
    per_device, accum = _batch(spec, seq_len, world)
    assert patched.method is not None
    return RunPlan(trained, target, window, seq_len, span, world, per_device, accum, spec.steps, spec.warmup_steps,
                   patched.method.label, patched.config)


def _check_target(trained: int, target: int, unscaled: bool) -> None:
    if target < trained or (target == trained and not unscaled):
        raise UsageError(f"the target context ({target:,} tokens) is not longer than the trained context "
                         f"({trained:,}): there is nothing to extend",
                         "pass a factor above 1 or a longer --target-length (or -m none to fine-tune in the window)")


def _batch(spec: FinetuneSpec, seq_len: int, world: int) -> tuple[int, int]:
    """(sequences per device per micro-step, gradient accumulation steps) for the requested global batch."""
    if spec.batch_size is not None:
        return spec.batch_size, spec.grad_accum or 1
    sequences = DEFAULT_SEQUENCES
    if spec.batch_tokens is not None:
        sequences = spec.batch_tokens // seq_len
        if sequences < 1 or spec.batch_tokens % seq_len:
            raise UsageError(f"--batch-tokens {spec.batch_tokens:,} is not a whole number of {seq_len:,}-token "
                             "sequences", f"pass a multiple of {seq_len:,}, e.g. --batch-tokens {8 * seq_len}")
    if sequences % world:
        raise UsageError(f"{sequences} sequences per step cannot be split evenly over {world} processes",
                         f"pass a batch that is a multiple of {world} sequences")
    return 1, sequences // world


def shape_of(config: Mapping[str, Any]) -> Shape:
    """Model dimensions from a config dict (text config of a multimodal model)."""
    c = dict(config.get("text_config") or config)
    hidden, layers = int(c["hidden_size"]), int(c["num_hidden_layers"])
    inter, vocab = int(c.get("intermediate_size") or 4 * hidden), int(c["vocab_size"])
    heads = int(c["num_attention_heads"])
    head_dim = int(c.get("head_dim") or hidden // heads)
    kv = int(c.get("num_key_value_heads") or heads)
    per_layer = hidden * head_dim * (2 * heads + 2 * kv) + 3 * hidden * inter
    tied = bool(c.get("tie_word_embeddings", False))
    params = layers * per_layer + vocab * hidden * (1 if tied else 2)
    return Shape(params, layers, hidden, inter, vocab, heads * head_dim)


def memory_bytes(shape: Shape, seq_len: int, per_device: int, trainable: int, bf16: bool, chunk: int,
                 shards: int = 1, mask: bool = False) -> int:
    """Estimated peak training memory of one process (see the module docstring)."""
    act = 2 if bf16 else 4
    tokens = per_device * seq_len
    states = (4 * shape.params + 12 * trainable) // shards
    if shards > 1:
        head = shape.vocab * shape.hidden
        states += 4 * (2 * max(shape.params - head, 0) // shape.layers + head)
    kept = shape.layers * tokens * shape.hidden * act
    layer = tokens * (10 * shape.hidden + 3 * shape.intermediate + 2 * shape.attention_width) * act
    logits = 3 * min(chunk, tokens) * shape.vocab * 4
    masks = per_device * seq_len * seq_len * (act + 2) if mask else 0
    return states + kept + layer + logits + masks


def flops_per_token(shape: Shape, seq_len: int) -> float:
    """Training FLOPs per token with the body recomputed once (8 x params: forward, backward, recompute) plus causal
    attention (4 x layers x length x width per forward, halved by the mask, times 4 passes)."""
    return 8.0 * shape.params + 8.0 * shape.layers * seq_len * shape.attention_width


def estimates(plan: RunPlan, shape: Shape, trainable: int, bf16: bool, chunk: int, flops_per_s: float | None,
              shards: int = 1, mask: bool = False) -> dict[str, Any]:
    """Memory of PoSE and full-length training per process (``shards``: FSDP's processes; ``mask``: a document
    mask is built), and an ETA at ``flops_per_s`` (None: no ETA)."""
    pose_len = plan.window if plan.window < plan.target else None
    out: dict[str, Any] = {"memory_bytes": {
        "full": memory_bytes(shape, plan.target, plan.per_device, trainable, bf16, chunk, shards, mask),
        **({"pose": memory_bytes(shape, pose_len, plan.per_device, trainable, bf16, chunk, shards, mask)}
           if pose_len else {})}}
    total = flops_per_token(shape, plan.seq_len) * plan.total_tokens
    out["flops"] = total
    out["eta_s"] = total / flops_per_s if flops_per_s else None
    return out


# The ETA of --dry-run assumes this fraction of the CPU's measured matmul FLOP/s (a stated guess, not a measurement
# of training: attention, norms and the optimizer run well below matmul speed).
ASSUMED_MFU = 0.3


def lora_params(shape: Any, r: int) -> int:
    """LoRA on q/k/v/o: r x (in + out) per projection and layer (k/v narrower under GQA: an upper estimate)."""
    return shape.layers * 4 * r * (shape.hidden + shape.attention_width)


def matmul_flops(dtype: str) -> float:
    """Best-of-3 FLOP/s of one SmolLM2-sized F.linear in the training dtype (well under a second)."""
    import torch

    from ropectl.runtime import linear_flops

    return linear_flops(torch.bfloat16 if dtype == "bf16" else torch.float32, (512, 576, 1536))
