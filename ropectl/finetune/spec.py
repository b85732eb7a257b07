"""What one ``ropectl finetune`` run is asked to do: a frozen spec, every model-free check made when it is built.

Defaults and where they come from (docs/how-to/finetune.md says more):
- LR 2e-5, AdamW: YaRN (``finetune.py``), PoSE (``train_pose.py``) and LongLoRA all train at 2e-5.
- warm-up 5 % of the steps (at least 1): YaRN's 20 warm-up steps of 400.
- gradient clipping 1.0 (transformers' Trainer default, YaRN's accelerate loop clips at 1.0 too).
- steps 200: PoSE reports PPL nearly converged by about 100 steps; YaRN trains 400 at s=16.
- 8 sequences per step: the references use 64; a CPU-sized default, raise it with --batch-tokens on a GPU.
- LoRA alpha 2 x r (LongLoRA's r=8, alpha=16), targets q/k/v/o projections.
- short documents and document masking (``packing``): see DEFAULT_SHORT_MIX and DEFAULT_DOC_MASK.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ropectl.errors import UsageError
from ropectl.finetune import sharding
from ropectl.finetune.loss import DEFAULT_CHUNK
from ropectl.rope.methods import MethodSpec

MODES = ("pose", "full")
DTYPES = ("auto", "bf16", "fp32")
DEFAULT_STEPS = 200
DEFAULT_LR = 2e-5
WARMUP_FRACTION = 0.05  # YaRN: 20 warm-up steps of 400
DEFAULT_SEQUENCES = 8  # sequences per step when neither --batch-tokens nor --batch-size is given
DEFAULT_HELD_OUT = 2
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
# ProLong mixes about 40 % short data into its long-context training and masks documents. On the tiny benchmark
# model (docs/reference/finetune-benchmark.md, "Short documents and document masking") 40 % short sequences cost
# retention on the python-docs text (PPL@128 +4.1 % [2.0, 6.2], 2 seeds) for no change at the target: off by
# default. Document masking was not determined there (0.9 % of the windows held a boundary): ProLong's default, on.
DEFAULT_SHORT_MIX = 0.0
DEFAULT_DOC_MASK = True


@dataclass(frozen=True, kw_only=True)
class FinetuneSpec:
    """One ``ropectl finetune`` invocation, fully resolved except what needs the model's config (``plan``)."""

    model: str
    method: MethodSpec
    output: Path
    target_length: int | None = None
    data: str | None = None
    mode: str = "pose"
    window: int | None = None
    steps: int = DEFAULT_STEPS
    lr: float = DEFAULT_LR
    warmup: int | None = None
    batch_tokens: int | None = None
    batch_size: int | None = None  # sequences per device per micro-step
    grad_accum: int | None = None
    lora: int | None = None
    lora_alpha: float | None = None
    train_embeddings_norms: bool = False
    merge: bool = False
    seed: int = 0
    eval_every: int | None = None
    held_out: int = DEFAULT_HELD_OUT
    held_out_docs: tuple[str, ...] = ()  # documents named to hold out (then held_out is their count)
    max_docs: int | None = None  # read the corpus's first N documents (needed for a streamed hub dataset)
    dtype: str = "auto"
    device: str = "auto"
    dry_run: bool = False
    resume: bool = False  # continue the run in OUT.run (--resume)
    force: bool = False
    context_parallel: int = 1
    fsdp: bool = False  # FSDP2 across the launched processes (accelerate launch --use_fsdp asks for it too)
    chunk_size: int = DEFAULT_CHUNK
    short_mix: float = DEFAULT_SHORT_MIX  # the fraction of training sequences packed from short documents
    doc_mask: bool = DEFAULT_DOC_MASK  # attention stays inside each packed document
    text_field: str = "text"
    split: str = "train"

    def __post_init__(self) -> None:
        _check_mode(self)
        _check_numbers(self)
        _check_lora(self)
        if self.dtype not in DTYPES:
            raise UsageError(f"--dtype {self.dtype} is not a training dtype here", f"use one of: {', '.join(DTYPES)}")

    @property
    def pose(self) -> bool:
        return self.mode == "pose"

    @property
    def sharded(self) -> bool:
        """FSDP2: ``--fsdp``, or the launcher's request (``accelerate launch --use_fsdp``)."""
        return sharding.requested(self.fsdp)

    @property
    def warmup_steps(self) -> int:
        return self.warmup if self.warmup is not None else max(1, round(WARMUP_FRACTION * self.steps))

    @property
    def lora_scale(self) -> float:
        return float(self.lora_alpha if self.lora_alpha is not None else 2 * (self.lora or 0))

    def with_(self, **changes: Any) -> FinetuneSpec:
        return replace(self, **changes)

    def identity(self) -> dict[str, Any]:
        """What must match for ``--resume`` to continue this run: everything that changes the trained weights."""
        keep = ("model", "target_length", "data", "mode", "window", "steps", "lr", "warmup", "batch_tokens",
                "batch_size", "grad_accum", "lora", "lora_alpha", "train_embeddings_norms", "seed", "held_out",
                "held_out_docs", "max_docs",
                "dtype", "chunk_size", "text_field", "split")
        out = {k: getattr(self, k) for k in keep}
        out["method"] = self.method.label
        if self.sharded:  # FSDP checkpoints are its own format (absent key: run folders before it)
            out["fsdp"] = True
        if self.short_mix:  # absent keys: neither (and run folders from before these options)
            out["short_mix"] = self.short_mix
        if self.doc_mask:
            out["doc_mask"] = True
        return out


def _check_mode(spec: FinetuneSpec) -> None:
    if spec.mode not in MODES:
        raise UsageError(f"unknown training mode '{spec.mode}'", "pass --pose (the default) or --full")
    if spec.mode == "full" and spec.window is not None:
        raise UsageError("--window sets PoSE's training window, and --full trains at the target length",
                         "drop --window, or drop --full to train with PoSE")
    if spec.context_parallel != 1:
        raise UsageError(f"context parallelism (--context-parallel {spec.context_parallel}) splits one sequence over "
                         "GPUs (accelerate's ParallelismConfig(cp_size=...) needs FSDP2 and CUDA SDPA): it cannot run "
                         "on CPU, and finetune does not wire it on GPUs yet",
                         "drop --context-parallel; train with PoSE (--pose), which needs no long sequence")


def _check_numbers(spec: FinetuneSpec) -> None:
    positive = {"--steps": spec.steps, "--batch-tokens": spec.batch_tokens, "--batch-size": spec.batch_size,
                "--grad-accum": spec.grad_accum, "--window": spec.window, "--eval-every": spec.eval_every,
                "--lora": spec.lora, "--target-length": spec.target_length, "--chunk-size": spec.chunk_size,
                "--max-docs": spec.max_docs}
    for flag, value in positive.items():
        if value is not None and value <= 0:
            raise UsageError(f"{flag} must be positive, got {value}", f"pass a positive {flag}")
    if not spec.lr > 0:
        raise UsageError(f"--lr must be positive, got {spec.lr:g}", "pass e.g. --lr 2e-5")
    if spec.warmup is not None and not 0 <= spec.warmup <= spec.steps:
        raise UsageError(f"--warmup {spec.warmup} is outside 0..--steps ({spec.steps})", "pass a smaller --warmup")
    if not 0 <= spec.short_mix < 1:
        raise UsageError(f"--short-mix is a fraction of the training sequences, from 0 up to (not including) 1, got "
                         f"{spec.short_mix:g}", "pass e.g. --short-mix 0.4 (or 0 for long sequences only)")
    if spec.held_out < 0:
        raise UsageError(f"--held-out must be 0 or more, got {spec.held_out}", "pass e.g. --held-out 2")
    if spec.batch_tokens is not None and (spec.batch_size is not None or spec.grad_accum is not None):
        raise UsageError("--batch-tokens and --batch-size / --grad-accum are two ways to size a step",
                         "pass --batch-tokens alone, or --batch-size (and --grad-accum)")
    if spec.eval_every is not None and spec.held_out == 0 and not spec.held_out_docs:
        raise UsageError("--eval-every scores held-out documents, and --held-out is 0", "pass --held-out 1 or more")


def _check_lora(spec: FinetuneSpec) -> None:
    if spec.merge and spec.lora is None:
        raise UsageError("--merge merges LoRA adapters into the weights, and no --lora is given",
                         "add --lora R, or drop --merge (a full fine-tune writes full weights anyway)")
    if spec.lora is None and spec.lora_alpha is not None:
        raise UsageError("--lora-alpha scales LoRA adapters, and no --lora is given", "add --lora R, or drop --lora-alpha")
    if spec.lora is None and spec.train_embeddings_norms:
        raise UsageError("--train-embeddings-norms adds embeddings and norms to LoRA's trainable set, and a full "
                         "fine-tune (no --lora) trains them already", "add --lora R, or drop --train-embeddings-norms")
