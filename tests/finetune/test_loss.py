"""The chunked, recomputed training loss equals transformers' own loss, value and gradient."""

from __future__ import annotations

from pathlib import Path

import pytest

from ropectl.finetune.loss import training_loss

# fp32 on CPU: the chunked sum reorders additions only, so value and gradient agree to float32 rounding.
REL = 1e-5


@pytest.mark.parametrize("chunk", [7, 64, 1000])
@pytest.mark.parametrize("positions", [False, True])
def test_chunked_loss_value_and_grad_equal_transformers(tmp_path: Path, chunk: int, positions: bool) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from tests.helpers.checkpoints import tiny_llama

    model = AutoModelForCausalLM.from_pretrained(tiny_llama(tmp_path / "m"), dtype=torch.float32)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 128, (2, 50), generator=g)
    kwargs = {"input_ids": ids}
    if positions:  # PoSE-style skipped positions go through both the same way
        kwargs["position_ids"] = torch.cat([torch.arange(20), torch.arange(20, 50) + 90])[None].repeat(2, 1)

    mask = {"attention_mask": torch.ones_like(ids)} if positions else {}  # one sequence (see the test below)
    want = model(**kwargs, **mask, labels=ids).loss  # the oracle: transformers' full-logits loss
    want.backward()
    want_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()

    got = training_loss(model, model, kwargs, chunk_size=chunk)
    got.backward()
    assert abs(got.item() - want.item()) <= REL * abs(want.item())
    for name, p in model.named_parameters():
        scale = float(want_grads[name].abs().max()) or 1.0
        assert float((p.grad - want_grads[name]).abs().max()) <= REL * scale, name


def test_pose_chunk_two_attends_chunk_one(tmp_path: Path) -> None:
    """PoSE's skipped positions are one sequence: the loss at chunk 2 depends on chunk 1's tokens. Negative control:
    the same forward without an attention mask, which transformers 5 cuts at the position jump."""
    import torch
    from transformers import AutoModelForCausalLM

    from ropectl.finetune.loss import captured_hidden
    from tests.helpers.checkpoints import tiny_llama

    model = AutoModelForCausalLM.from_pretrained(tiny_llama(tmp_path / "m"), dtype=torch.float32).eval()
    ids = torch.randint(3, 128, (1, 40), generator=torch.Generator().manual_seed(1))
    changed = ids.clone()
    changed[0, :10] = (changed[0, :10] + 7) % 125 + 3  # chunk 1 is tokens 0..9
    positions = torch.cat([torch.arange(10), torch.arange(10, 40) + 500])[None]

    def chunk_two(tokens: torch.Tensor, mask: bool) -> torch.Tensor:
        extra = {"attention_mask": torch.ones_like(tokens)} if mask else {}
        with torch.no_grad(), captured_hidden(model) as box:
            model(input_ids=tokens, position_ids=positions, use_cache=False, **extra)  # as training runs
        return box["hidden"][0, 10:]

    def train_path(tokens: torch.Tensor) -> float:
        with torch.no_grad():
            return training_loss(model, model, {"input_ids": tokens, "position_ids": positions}).item()

    assert not torch.allclose(chunk_two(ids, True), chunk_two(changed, True))
    assert torch.allclose(chunk_two(ids, False), chunk_two(changed, False))  # the cut this guards against
    # the training loss only over chunk 2's predictions differs too (it sees chunk 1)
    assert train_path(ids) != train_path(changed)


def test_trainer_runs_the_head_under_its_bf16_autocast(tmp_path: Path) -> None:
    """accelerate wraps only model.forward in autocast; the chunked head runs after it and must see the same bf16
    autocast (else the [chunk, vocab] matmul runs in fp32). Oracle: the dtype lm_head's output has, observed by a hook;
    negative control: the same trainer with bf16 off gives fp32."""
    import torch
    from transformers import AutoModelForCausalLM, TrainingArguments

    from ropectl.finetune.trainer import make_trainer
    from tests.helpers.checkpoints import tiny_llama

    folder = tiny_llama(tmp_path / "m")
    seen = {}
    for bf16 in (True, False):
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).train()
        dtypes: list[torch.dtype] = []
        model.get_output_embeddings().register_forward_hook(lambda m, a, out, d=dtypes: d.append(out.dtype))
        args = TrainingArguments(output_dir=str(tmp_path / "run"), max_steps=1, per_device_train_batch_size=1,
                                 bf16=bf16, use_cpu=True, report_to=[], save_strategy="no", disable_tqdm=True,
                                 remove_unused_columns=False)
        ids = torch.randint(0, 128, (50,), generator=torch.Generator().manual_seed(0))
        trainer = make_trainer(model, args, [{"input_ids": ids.numpy()}], 16, [])
        trainer.train()
        seen[bf16] = set(dtypes[1:])  # [0] is the forward's own 1-position head (logits_to_keep=1)
    assert seen[True] == {torch.bfloat16}
    assert seen[False] == {torch.float32}
