"""FSDP2 (``--fsdp``): 2 CPU processes under torchrun (gloo) with sharded weights, gradients and optimizer states train
what 1 process trains with the same global batch, write full weights, and resume exactly.

accelerate has no CPU FSDP path (its CPU processes run DDP), so ``sharding.enable_on_cpu`` switches the state; the
sharding itself is torch's ``fully_shard`` as accelerate's ``fsdp2_prepare_model`` applies it on GPUs.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.eval_data import build
from tests.helpers.launch import PARALLEL_ATOL, finetune_env, free_port, run_finetune

ARGS = ["-m", "yarn:4", "--steps", "3", "--batch-tokens", "128", "--dtype", "fp32", "--device", "cpu", "--lr", "1e-3"]


def _torchrun() -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port())]


def _close(one: dict, two: dict, base: dict | None = None) -> None:
    assert one.keys() == two.keys()
    if base is not None:  # negative control: training moved the weights far beyond the tolerance
        assert max(float((one[k] - base[k]).abs().max()) for k in base if k in one) > 100 * PARALLEL_ATOL
    for name in one:
        assert float((one[name] - two[name]).abs().max()) <= PARALLEL_ATOL, name


@pytest.mark.slow
@pytest.mark.dist
def test_two_process_fsdp_equals_one_process(ft_model: Path, ft_corpus: Path, isolated: Path) -> None:
    """A full fine-tune of a model with its own head (the head's unit is the final norm and lm_head), launched by
    ``accelerate launch --use_fsdp --fsdp_version 2`` without ``--fsdp``: the launcher's request is honoured."""
    from safetensors.torch import load_file

    args = [str(ft_model), *ARGS, "--dataset", str(ft_corpus)]
    accelerate = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--num_machines", "1",
                  "--mixed_precision", "no", "--dynamo_backend", "no", "--use_fsdp", "--fsdp_version", "2",
                  "--main_process_port", str(free_port())]
    run_finetune(accelerate, [*args, "-o", str(isolated / "two")], isolated)
    run_finetune([sys.executable], [*args, "-o", str(isolated / "one")], isolated)
    one, two = (load_file(str(isolated / d / "model.safetensors")) for d in ("one", "two"))
    _close(one, two, load_file(str(ft_model / "model.safetensors")))
    record = json.loads((isolated / "two" / "config.json").read_text())["ropectl"]["finetune"]
    assert record["parallel"] == {"processes": 2, "fsdp": True}


@pytest.mark.slow
@pytest.mark.dist
def test_fsdp_lora_with_tied_embeddings_equals_one_process(ft_corpus: Path, isolated: Path) -> None:
    """LoRA plus trained embeddings and norms on a model whose head is its input embedding (SmolLM2's case: one unit
    holds the norm, the embedding and the head), with gradient accumulation; the adapter folders agree."""
    from safetensors.torch import load_file

    model = build("llama", isolated / "tied", max_position_embeddings=64, tie_word_embeddings=True)
    # 4 sequences a step: 2 micro-steps per process here (reduce-scattered each), 4 in one process
    args = [str(model), *ARGS, "--dataset", str(ft_corpus), "--lora", "4", "--train-embeddings-norms",
            "--batch-tokens", "256"]
    run_finetune(_torchrun(), [*args, "--fsdp", "-o", str(isolated / "two")], isolated)
    run_finetune([sys.executable], [*args, "-o", str(isolated / "one")], isolated)
    one, two = (load_file(str(isolated / d / "adapter_model.safetensors")) for d in ("one", "two"))
    assert any("embed_tokens" in k for k in one) and any("lora_B" in k for k in one)
    _close(one, two)
    assert max(float(v.abs().max()) for k, v in one.items() if "lora_B" in k) > 100 * PARALLEL_ATOL  # B starts at 0


@pytest.mark.slow
@pytest.mark.dist
def test_fsdp_resume_after_a_rank_is_stopped_equals_uninterrupted(ft_model: Path, ft_corpus: Path,
                                                                  isolated: Path) -> None:
    """SIGTERM to one worker: every rank stops after the step, FSDP's checkpoint is saved, --resume finishes."""
    from safetensors.torch import load_file

    args = [str(ft_model), *ARGS, "--dataset", str(ft_corpus), "--fsdp", "--steps", "6"]
    run_finetune(_torchrun(), [*args, "-o", str(isolated / "a")], isolated)
    proc = subprocess.Popen([*_torchrun(), "-m", "ropectl", "finetune", *args, "-o", str(isolated / "b")],
                            cwd=isolated, env=finetune_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log, deadline = isolated / "b.run" / "train_log.jsonl", time.monotonic() + 120
    while not (log.is_file() and log.read_text().count("\n") >= 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    workers = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    os.kill(int(workers[-1]), signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "resume with:" in err, err[-2000:]
    assert any((isolated / "b.run").glob("checkpoint-*")) and not (isolated / "b").exists()
    line = next(x for x in err.splitlines() if "resume with:" in x)
    command = shlex.split(line.split("resume with: ", 1)[1])  # the launcher too, with as many processes
    assert command[:5] == ["torchrun", "--nproc_per_node", "2", "-m", "ropectl"], command
    assert command[-1] == "--resume" and command.count("--resume") == 1
    run_finetune(_torchrun(), command[6:], isolated)
    a, b = (load_file(str(isolated / d / "model.safetensors")) for d in ("a", "b"))
    _close(a, b)
    rows = [json.loads(x) for x in (isolated / "b" / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 7))


def test_fsdp_without_a_launcher_is_refused(ft_model: Path, ft_corpus: Path, isolated: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "ropectl", "finetune", str(ft_model), *ARGS, "--dataset", str(ft_corpus),
                           "--fsdp", "-o", str(isolated / "out")], cwd=isolated, env=finetune_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "not launched" in lines[0] and "torchrun --nproc_per_node" in lines[0]
    assert not (isolated / "out").exists() and not (isolated / "out.run").exists()


@pytest.mark.parametrize(("env", "eval_every", "words"), [
    ({"FSDP_VERSION": "1"}, None, "--fsdp_version 2"),
    ({}, 5, "--eval-every"),
])
def test_fsdp_refusals(env: dict[str, str], eval_every: int | None, words: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from ropectl.errors import UsageError
    from ropectl.finetune import sharding

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(UsageError) as info:
        sharding.check(True, 2, eval_every)
    assert words in f"{info.value.problem} {info.value.fix}"
    sharding.check(False, 2, eval_every)  # negative control: without FSDP nothing is refused


def test_accelerate_launch_use_fsdp_asks_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from ropectl.finetune import sharding

    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    assert not sharding.requested(False) and sharding.training_kwargs(False) == {}
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")  # what `accelerate launch --use_fsdp` exports
    assert sharding.requested(False)
    assert sharding.training_kwargs(False)["fsdp_config"]["version"] == 2


def test_fsdp_memory_estimate_divides_the_states() -> None:
    """Hand-computed: 1000 params, all trainable, fp32: states 4 x 1000 + 12 x 1000 = 16,000 bytes in one process;
    over 2 FSDP processes 8,000 plus the gathered units: 2 layers of (1000 - 10 x 4) / 2 params and the 40-param
    head, at 4 bytes: 4 x (960 + 40) = 4,000. Everything else is the same."""
    from ropectl.finetune.plan import Shape, memory_bytes

    shape = Shape(params=1000, layers=2, hidden=4, intermediate=8, vocab=10, attention_width=4)
    one, two = (memory_bytes(shape, 8, 1, 1000, False, 1024, shards) for shards in (1, 2))
    assert one - two == 16_000 - (8_000 + 4_000)


@pytest.mark.parametrize(("env", "asked", "expected"), [
    ({"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "0", "ACCELERATE_USE_FSDP": "true"}, [],
     "torchrun --nproc_per_node 2 -m ropectl finetune M -o OUT --fsdp --resume"),
    ({"WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "LOCAL_RANK": "0"}, [],  # one launched process: still torchrun
     "torchrun --nproc_per_node 1 -m ropectl finetune M -o OUT --resume"),
    ({}, [], "ropectl finetune M -o OUT --resume"),  # control: one process, no launcher
    ({}, ["--resume"], "ropectl finetune M -o OUT --resume"),  # a resumed run's own --resume is not repeated
])
def test_resume_command_names_the_launcher_and_what_it_asked(env: dict[str, str], asked: list[str], expected: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`accelerate launch --use_fsdp` asked for FSDP through the environment; the printed torchrun command must ask
    with --fsdp, else the resumed run would not shard and its identity would differ."""
    from ropectl.finetune.runs import resume_command

    for key in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "LOCAL_RANK", "ACCELERATE_USE_FSDP"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(sys, "argv", ["ropectl", "finetune", "M", "-o", "OUT", *asked])
    assert resume_command() == expected
