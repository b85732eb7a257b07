"""FSDP2 for ``ropectl finetune``: weights, gradients and optimizer states sharded across processes.

Asked for with ``--fsdp`` (under ``torchrun``) or by ``accelerate launch --use_fsdp --fsdp_version 2``; transformers'
Trainer hands it to accelerate, whose ``fsdp2_prepare_model`` shards each decoder layer and groups the final norm,
the head (and tied input embeddings) in one unit. What needs more than DDP does:

- **The chunked head** (``loss.py``) runs after the model's forward, outside FSDP's hooks. ``head_for_loss`` unshards
  the head's unit (a no-op when accelerate left it unsharded after the forward) and hands the loss the unsharded
  parameters and a head that calls ``forward`` directly: a hooked call per chunk would make FSDP run its backward
  hooks inside the loss's own per-chunk gradient and reshard the head mid-loss. The head's gradients reach the
  unsharded parameters' ``.grad`` in the backward pass, where FSDP's post-backward reduce-scatters them as it does
  any gradient (tests/finetune/test_fsdp.py: 2 FSDP processes train what 1 process does).
- **bf16**: accelerate's policy reduces gradients in bf16; ``configure`` reduces (and accumulates) them in fp32, as
  the unsharded path's fp32 master weights do.
- **Checkpoints** are sharded (``FSDP_CONFIG``). **The final write** needs the full weights: ``gather_full_weights``
  all-gathers one parameter at a time (every rank takes part) and rank 0 keeps each on CPU in place of its shard,
  tied weights kept tied (an adapter not merged: the trained weights only).
- **CPU**: accelerate 1.15 has no FSDP path for CPU processes (``MULTI_CPU`` ignores the plugin and runs DDP), while
  torch's ``fully_shard`` runs over gloo. ``configure`` switches the accelerator's state to FSDP with the
  Trainer's own plugin, so CPU runs the same accelerate code path a GPU run does.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ropectl.errors import UsageError

# FSDP2 through transformers' fsdp_config; accelerate wraps the model's _no_split_modules (its decoder layers). Checkpoints are
# sharded: each rank writes its own part, where a full one would gather the model and AdamW states on rank 0
FSDP_CONFIG = {"version": 2, "state_dict_type": "SHARDED_STATE_DICT"}


def requested(flag: bool) -> bool:
    """``--fsdp``, or ``accelerate launch --use_fsdp`` (which says so in the environment)."""
    return flag or os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"


def check(flag: bool, world_size: int, eval_every: int | None) -> None:
    """The refusals of an FSDP run, before any weight loads."""
    if not requested(flag):
        return
    version = os.environ.get("FSDP_VERSION", "2")
    if version != "2":
        raise UsageError(f"the launcher asks for FSDP version {version}, and finetune shards with FSDP2",
                         "launch with --fsdp_version 2")
    if world_size < 2 and "LOCAL_RANK" not in os.environ:  # one launched process runs FSDP's path, unsharded
        raise UsageError("FSDP shards the weights across launched processes, and this run is 1 process, not launched",
                         "launch N processes (torchrun --nproc_per_node N -m ropectl finetune ... --fsdp), or drop "
                         "--fsdp")
    if eval_every is not None:
        raise UsageError("--eval-every scores on rank 0 alone, and FSDP needs every rank in each forward",
                         "drop --eval-every and score the output with ropectl eval-ppl (or train without --fsdp)")


def training_kwargs(flag: bool) -> dict[str, Any]:
    """TrainingArguments' FSDP settings (none without FSDP). Gradients are reduce-scattered after every micro-step
    (``sync_each_batch``): under Trainer's default ``no_sync``, FSDP2 would keep each micro-step's gradient unsharded
    (in fp32) until the last one, a full copy per process that sharding is there to avoid."""
    if not requested(flag):
        return {}
    return {"fsdp": "full_shard", "fsdp_config": dict(FSDP_CONFIG),
            "accelerator_config": {"gradient_accumulation_kwargs": {"sync_each_batch": True}}}


def configure(trainer: Any) -> None:
    """Once the Trainer's accelerator exists, before it shards the model: FSDP on CPU, and bf16 runs reduce (and
    accumulate) gradients in fp32 as the unsharded fp32 path does; accelerate's bf16 policy reduces in bf16."""
    _enable_on_cpu(trainer)
    if not trainer.is_fsdp_enabled or trainer.accelerator.state.mixed_precision != "bf16":
        return
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    trainer.accelerator.state.fsdp_plugin.mixed_precision_policy = MixedPrecisionPolicy(
        param_dtype=torch.bfloat16, reduce_dtype=torch.float32, output_dtype=torch.bfloat16)


def _enable_on_cpu(trainer: Any) -> None:
    """Give a CPU run the FSDP2 that the Trainer's arguments ask for and accelerate's CPU state drops."""
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    state = trainer.accelerator.state
    if trainer.args.fsdp_plugin_args is None or trainer.is_fsdp_enabled or state.distributed_type != \
            DistributedType.MULTI_CPU:
        return
    state.distributed_type = DistributedType.FSDP
    state.fsdp_plugin = FullyShardedDataParallelPlugin(**trainer.args.fsdp_plugin_args)
    # as accelerate's own GPU path does: each later AcceleratorState() copies PartialState's type over its own
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    trainer.is_fsdp_enabled = True


def _unit_of(module: Any, root: Any) -> Any:
    """The FSDP unit whose parameters ``module`` uses: itself when sharded on its own or in a group, else the root."""
    from torch.distributed.fsdp import FSDPModule

    return module if isinstance(module, FSDPModule) else root


def head_for_loss(inner: Any) -> tuple[Callable[[Any], Any], list[Any]]:
    """(hidden -> logits, the head's parameters) for the chunked loss; under FSDP2 the head's unit is unsharded first
    and the head is called without FSDP's hooks (its ``forward``), with the unsharded parameters."""
    from torch.distributed.fsdp import FSDPModule

    from ropectl.runtime import logits_fn

    out = inner.get_output_embeddings()
    if not isinstance(inner, FSDPModule):
        return logits_fn(inner), list(out.parameters())
    # all-gathers if resharded (a no-op after accelerate's forward); FSDP's post-backward (its hook on the norm's
    # input, or the root's final callback for a tied head) reduce-scatters the head's gradient and reshards
    _unit_of(out, inner).unshard()
    return logits_fn(inner, project=out.forward), list(out.parameters())


def gather_full_weights(model: Any, is_main: bool, trainable_only: bool = False) -> None:
    """Every rank: all-gather each sharded parameter in turn (one full tensor on the device at a time); rank 0 puts
    it, on CPU, in place of its shard, so rank 0's model holds plain full weights for the writer. A no-op without
    FSDP. Tied parameters are gathered once and stay one tensor. ``trainable_only``: frozen ones stay sharded (the
    same on every rank: requires_grad is part of the model's structure)."""
    import torch
    from torch.distributed.tensor import DTensor

    full: dict[int, Any] = {}
    for module in model.modules():  # the same order on every rank: the collectives pair up
        for name, param in list(module.named_parameters(recurse=False)):
            if not isinstance(param, DTensor) or (trainable_only and not param.requires_grad):
                continue
            if id(param) not in full:
                tensor = param.full_tensor()
                full[id(param)] = torch.nn.Parameter(tensor.cpu(), param.requires_grad) if is_main else None
                del tensor
            if is_main:
                setattr(module, name, full[id(param)])
    if is_main and full:
        for module in model.modules():
            for name, buffer in list(module.named_buffers(recurse=False)):
                if buffer is not None:
                    setattr(module, name, buffer.cpu())
