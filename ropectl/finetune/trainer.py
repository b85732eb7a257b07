"""transformers' Trainer as finetune runs it: its arguments from the plan, and a subclass with the chunked loss.

Why transformers' Trainer and not TRL: the loss here is our own (the chunked head of ``loss.py``) and the data are
already packed windows with PoSE position ids, so TRL's SFTTrainer would add only dataset handling we do not use.
FSDP2 comes through the same arguments (``sharding.training_kwargs``) and ``sharding.configure``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ropectl.finetune import sharding
from ropectl.finetune.plan import RunPlan
from ropectl.finetune.spec import FinetuneSpec


def training_arguments(spec: FinetuneSpec, plan: RunPlan, run_dir: Path, device: str, dtype: str) -> Any:
    import dataclasses
    import os

    from transformers import TrainingArguments

    cpu = device == "cpu"
    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    ckpt = "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"  # 5.2x
    distributed = int(os.environ.get("WORLD_SIZE", "1") or 1) > 1
    return TrainingArguments(
        output_dir=str(run_dir), max_steps=plan.steps, per_device_train_batch_size=plan.per_device,
        gradient_accumulation_steps=plan.grad_accum, learning_rate=spec.lr, warmup_steps=plan.warmup,
        weight_decay=0.0, adam_beta2=0.95,  # YaRN's AdamW betas (0.9, 0.95); Trainer's default schedule: linear decay
        max_grad_norm=1.0, bf16=dtype == "bf16", use_cpu=cpu, seed=spec.seed, data_seed=spec.seed,
        logging_steps=1, save_strategy="no", save_total_limit=1, report_to=[], disable_tqdm=True,
        remove_unused_columns=False, dataloader_num_workers=0, ddp_find_unused_parameters=False,
        ddp_backend="gloo" if cpu and distributed else None,
        **{ckpt: True, f"{ckpt}_kwargs": {"use_reentrant": False}}, **sharding.training_kwargs(spec.fsdp),
    )


def make_trainer(model: Any, args: Any, dataset: Any, chunk_size: int, callbacks: list[Any]) -> Any:
    """transformers' Trainer with our loss (``loss.training_loss``) and the dataset read in order."""
    from accelerate.utils import AutocastKwargs
    from torch.utils.data import SequentialSampler
    from transformers import Trainer

    from ropectl.finetune.data import collate
    from ropectl.finetune.loss import training_loss

    class RopeTrainer(Trainer):
        loss_is_scaled_for_ga = False  # compute_loss returns a micro-batch mean; Trainer divides by the accumulation

        def create_accelerator_and_postprocess(self) -> None:
            super().create_accelerator_and_postprocess()
            sharding.configure(self)  # FSDP on CPU too; gradients reduced in fp32

        def compute_loss(self, model: Any, inputs: Any, return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:
            # accelerate puts autocast around model.forward only; the chunked head runs after the forward and
            # needs the same autocast, else a bf16 run's lm_head runs in fp32 (measured 1.6x a 2-layer 4k step)
            loss = training_loss(model, self.accelerator.unwrap_model(model), inputs, chunk_size,
                                 amp=lambda: self.accelerator.autocast(AutocastKwargs(cache_enabled=True)),
                                 bf16=bool(self.args.bf16))
            return (loss, None) if return_outputs else loss

        def _get_train_sampler(self, train_dataset: Any = None) -> Any:
            # Example j is already a seeded function of j (data.PackedExamples): order is the data's own
            return SequentialSampler(train_dataset if train_dataset is not None else self.train_dataset)

    trainer = RopeTrainer(model=model, args=args, train_dataset=dataset, data_collator=collate, callbacks=callbacks)
    # Autocast's cache keeps every layer's bf16 weight copy until the forward ends (212 MB for SmolLM2-135M) and
    # saves nothing here: each layer's weights are used once per forward (the head above keeps its cache: 1 x chunks)
    trainer.accelerator.autocast_handler = AutocastKwargs(cache_enabled=False)
    trainer.model_accepts_loss_kwargs = False
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for quiet in (PrinterCallback, ProgressCallback):  # stdout stays ours (--json); our callback reports progress
        trainer.remove_callback(quiet)
    return trainer
