"""A run's folder beside its output (``OUT.run/``) and how a run stops: Ctrl-C / SIGTERM save a checkpoint there,
``--resume`` continues from it, and a folder from another run is refused."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from ropectl.errors import OutputError, UsageError
from ropectl.finetune.spec import FinetuneSpec
from ropectl.output import dumps
from ropectl.runtime import Interrupted, launcher, resume_line

RUN_FILE = "run.json"


class FinetuneInterrupted(Interrupted):
    """Ctrl-C or SIGTERM: a checkpoint is saved in the run folder; exit 130 (143 for SIGTERM)."""

    def __init__(self, run_dir: Path, step: int, terminated: bool) -> None:
        self.run_dir, self.step = run_dir, step
        super().__init__(f"{'terminated' if terminated else 'interrupted'} at step {step}; checkpoint saved in "
                         f"{run_dir}", "rerun the same command with --resume", terminated=terminated,
                         resume=resume_command())


def resume_command(argv: list[str] | None = None) -> str:
    """This command line again with ``--resume`` (once), under the launcher that started it; ``--fsdp`` where
    ``accelerate launch --use_fsdp`` asked for it, since torchrun will not, and the resumed run must shard alike."""
    from ropectl.finetune import sharding

    args = sys.argv if argv is None else argv
    extra = ["--fsdp"] if sharding.requested(False) and "--fsdp" not in args else []
    return resume_line(extra=extra, launcher=launcher(), argv=args)


def run_dir_for(output: Path) -> Path:
    output = Path(output)
    return output.parent / f"{output.name}.run"


def prepare_run_dir(spec: FinetuneSpec, run_dir: Path, world_main: bool) -> Path | None:
    """Check (resume) or create (fresh) the run folder; returns the checkpoint to resume from, if any."""
    marker = run_dir / RUN_FILE
    if spec.resume:
        try:
            saved = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise UsageError(f"'{run_dir}' is not a finetune run folder (no readable {RUN_FILE})",
                             "pass the --output of the interrupted run, or start a new run without --resume") from None
        now, then = json.loads(dumps(spec.identity())), saved.get("identity") or {}
        if then != now:
            diff = sorted(k for k in {*now, *then} if now.get(k) != then.get(k))
            raise UsageError(f"the run folder '{run_dir}' belongs to another run (it differs in {', '.join(diff)})",
                             "rerun with the flags of the interrupted run, or start a new run without --resume")
        return last_checkpoint(run_dir)
    if not world_main:  # rank 0 alone checks and creates a fresh run's folder
        return None
    if run_dir.exists():
        if not (marker.is_file() and spec.force):
            raise OutputError(f"'{run_dir}' exists (an earlier run's folder)",
                              "resume it with --resume, or pass --force to start over")
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    marker.write_text(dumps({"identity": spec.identity()}, indent=1) + "\n", encoding="utf-8")
    return None


def last_checkpoint(run_dir: Path) -> Path | None:
    found = sorted((p for p in run_dir.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()),
                   key=lambda p: int(p.name.split("-")[-1]))
    return found[-1] if found else None


@contextlib.contextmanager
def stop_signals() -> Iterator[Callable[[], str | None]]:
    """While open, the first Ctrl-C / SIGTERM asks the trainer to stop after this step; a second Ctrl-C aborts."""
    got: list[str] = []

    def ask(signum: int, frame: object) -> None:
        if got and signum == signal.SIGINT:
            raise KeyboardInterrupt
        got.append("SIGTERM" if signum == signal.SIGTERM else "SIGINT")

    try:
        previous = {s: signal.signal(s, ask) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: signals stay as they are
        yield lambda: None
        return
    try:
        yield lambda: got[0] if got else None
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def any_rank(flag: bool) -> bool:
    """A stop asked on one rank stops every rank at the same step (else the others would wait for ever)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return flag
    # NCCL takes CUDA tensors only (accelerate starts a plain "nccl" group on GPUs); gloo takes CPU ones
    on = torch.device("cuda", torch.cuda.current_device()) if "nccl" in str(dist.get_backend()) else "cpu"
    t = torch.tensor([1 if flag else 0], device=on)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())

