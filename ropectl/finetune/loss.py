"""The training loss without [sequence, vocab] logits: the decoder body once, then lm_head + cross-entropy in chunks
whose gradient is taken as each chunk is computed, so no chunk's logits outlive it and none is recomputed.

The value is the mean next-token cross-entropy over every position of the batch, exactly what transformers'
``model(labels=input_ids).loss`` computes (fp32 logits, shifted labels); the gradient is that loss's gradient
(tests/finetune/test_loss.py checks both against transformers). The loss is linear in each position's term, so a
chunk's gradient with respect to its hidden states and to the head's weights is final the moment the chunk is done:
``HeadLoss.forward`` runs each chunk forward and backward at once (the "fused linear cross-entropy" of Liger-Kernel
and Cut Cross-Entropy, here with torch's own autograd so any head works: softcapping and logit scales included) and
keeps only the hidden states' gradient ([positions, hidden]) and the head's ([vocab, hidden]); the backward pass
scales them. The earlier form checkpointed each chunk and ran its lm_head a third time in backward (about 3 % of a
SmolLM2 step at 4k). Peak memory for the loss is one chunk's logits, their fp32 copy and gradient, whatever the length.

The evaluation engine's chunked NLL (``eval/engines/hf/loss.py``) runs under ``inference_mode`` and cannot train, so
this is its training twin; the head itself is the runtime's ``logits_fn``, which the engine scores with too.

The forward goes through the (possibly DDP- or FSDP-wrapped) model with ``logits_to_keep=1``, so data parallelism sees an
ordinary forward; a hook on the decoder body keeps its last hidden state for the chunked head. The head runs under
``amp`` (the Trainer's autocast: accelerate wraps only ``model.forward`` in it, and the head runs after).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ropectl.runtime import decoder

# positions per lm_head chunk: the chunk's logits in bf16, their fp32 log-probabilities (then gradient) and the
# bf16 gradient, about 10 bytes each (500 MB at 1024 x 49k); 512 takes half that and was 5-10 % slower on a
# head-bound 2-layer step (the head's weight gradient is one [vocab, hidden] product and sum per chunk)
DEFAULT_CHUNK = 1024


@contextlib.contextmanager
def captured_hidden(model: Any) -> Iterator[dict[str, Any]]:
    """While open, ``box["hidden"]`` is the decoder body's last hidden state [B, T, H] of the latest forward."""
    box: dict[str, Any] = {}

    def keep(module: Any, args: Any, output: Any) -> None:
        box["hidden"] = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]

    handle = decoder(model).register_forward_hook(keep)
    try:
        yield box
    finally:
        handle.remove()


def chunked_loss(hidden: Any, input_ids: Any, head: Callable[[Any], Any], chunk_size: int = DEFAULT_CHUNK,
                 head_params: Sequence[Any] = (), keep: Any = None) -> Any:
    """Mean cross-entropy of ``input_ids[:, 1:]`` given ``hidden[:, :-1]``; ``head_params`` are the head's trainable
    parameters (they receive the head's gradient); ``keep`` [batch, T - 1] bools: only those targets count
    (document masking drops the ones that cross a document boundary)."""
    h = hidden[:, :-1].reshape(-1, hidden.shape[-1])
    targets = input_ids[:, 1:].reshape(-1).to(h.device)
    if keep is not None:
        rows = keep.reshape(-1).to(h.device)
        h, targets = h[rows], targets[rows]
    params = [p for p in head_params if p.requires_grad]
    return _head_loss().apply(h, targets, head, chunk_size, *params) / h.shape[0]


@functools.cache
def _head_loss() -> Any:
    """The autograd Function (built on first use: torch is imported lazily)."""
    import torch

    class HeadLoss(torch.autograd.Function):
        """Summed cross-entropy whose gradient is computed chunk by chunk in the forward pass."""

        @staticmethod
        def forward(ctx: Any, hidden: Any, targets: Any, head: Any, chunk: int, *params: Any) -> Any:
            grads: list[Any] = [torch.empty_like(hidden)] if hidden.requires_grad else []
            grads += [None] * len(params)  # the first chunk's gradient becomes each accumulator
            total = torch.zeros((), dtype=torch.float32, device=hidden.device)
            for start in range(0, hidden.shape[0], chunk):
                part = hidden[start:start + chunk].detach().requires_grad_(hidden.requires_grad)
                inputs = ([part] if hidden.requires_grad else []) + list(params)
                loss, step = _chunk_loss_and_grads(head, part, targets[start:start + chunk], inputs)
                total += loss
                for i, g in enumerate(step):
                    if i == 0 and hidden.requires_grad:
                        grads[0][start:start + chunk] = g
                    elif grads[i] is None:
                        grads[i] = g.float()  # summed over chunks in fp32 (FSDP's bf16 policy gives bf16 weights)
                    else:
                        grads[i] += g
            # kept on ctx, not save_for_backward: neither inputs nor outputs, and backward scales them in place
            ctx.grads, ctx.has_hidden = grads, hidden.requires_grad
            ctx.dtypes = ([hidden.dtype] if hidden.requires_grad else []) + [p.dtype for p in params]
            return total

        @staticmethod
        def backward(ctx: Any, grad_out: Any) -> Any:
            grads, ctx.grads = [g.mul_(grad_out).to(d) for g, d in zip(ctx.grads, ctx.dtypes)], None
            hidden_grad = grads.pop(0) if ctx.has_hidden else None
            return (hidden_grad, None, None, None, *grads)

    return HeadLoss


def _chunk_loss_and_grads(head: Callable[[Any], Any], part: Any, targets: Any, inputs: list[Any]) -> tuple[Any, Any]:
    """Summed cross-entropy of one chunk with fp32 log-probabilities (transformers upcasts the logits), and its
    gradient with respect to ``inputs``. d(-log p_t)/d logits = softmax - onehot(t), computed in place in the
    log-probabilities' buffer: no autograd graph over the [chunk, vocab] softmax, one fp32 buffer instead of four."""
    import torch

    with torch.enable_grad():
        logits = head(part)
    with torch.no_grad():
        logp = torch.log_softmax(logits.detach(), -1, dtype=torch.float32)
        rows = torch.arange(targets.shape[0], device=targets.device)
        loss = -logp[rows, targets].sum()
        logp.exp_()  # now the softmax
        logp[rows, targets] -= 1.0
        grad = logp.to(logits.dtype)  # the upcast's backward: the gradient reaches the head in its own dtype
        del logp  # the fp32 buffer goes before the head's backward allocates its own
    return loss, torch.autograd.grad(logits, inputs, grad) if inputs else ()


def training_loss(model: Any, inner: Any, batch: Mapping[str, Any], chunk_size: int = DEFAULT_CHUNK,
                  amp: Callable[[], Any] = contextlib.nullcontext, bf16: bool = False) -> Any:
    """The loss of ``batch`` (input_ids, optional position_ids and segment_ids) through ``model`` (DDP- or FSDP-wrapped,
    or not), whose unwrapped causal LM (a PreTrainedModel or a peft model) is ``inner``; the head runs under ``amp()``.
    With segment_ids, attention and the scored targets stay inside each segment (``packing``); ``bf16``: the
    attention runs in bf16 (autocast), so the mask is built in it."""
    from ropectl.finetune.memory import release_freed_memory
    from ropectl.finetune.sharding import head_for_loss

    kwargs = {k: v for k, v in batch.items() if k in ("input_ids", "position_ids")}
    release_freed_memory(kwargs["input_ids"].device)  # the previous step's gradients and states' churn
    keep = None
    segments = batch.get("segment_ids")
    # a batch with one document per row needs no mask: the plain path keeps SDPA's causal kernels (no T x T mask)
    if segments is not None and bool((segments[:, 1:] != segments[:, :-1]).any()):
        import torch

        from ropectl.finetune.packing import document_mask, kept_targets

        segments = segments.to(kwargs["input_ids"].device)
        kwargs["attention_mask"] = document_mask(segments, torch.bfloat16 if bf16 else torch.float32)
        keep = kept_targets(segments)
    elif "position_ids" in kwargs:
        # Without a mask, transformers 5 reads any position jump as the start of another packed sequence
        # (masking_utils.find_packed_sequence_indices) and cuts attention there: PoSE's chunk 2 would never see
        # chunk 1. An explicit all-ones mask says every token is one sequence.
        import torch

        kwargs["attention_mask"] = torch.ones_like(kwargs["input_ids"])
    with captured_hidden(inner) as box:
        try:
            model(**kwargs, use_cache=False, logits_to_keep=1)
        except TypeError as exc:  # a model class without logits_to_keep: its full logits are computed and dropped
            if "logits_to_keep" not in str(exc):
                raise
            model(**kwargs, use_cache=False)
    hidden = box.pop("hidden")
    release_freed_memory(hidden.device)  # the body's activations, before the head's large chunks
    head, params = head_for_loss(inner)  # under FSDP2: unsharded, called outside its hooks
    with amp():
        return chunked_loss(hidden, batch["input_ids"], head, chunk_size, params, keep)
