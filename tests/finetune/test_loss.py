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

    want = model(**kwargs, labels=ids).loss  # the oracle: transformers' full-logits loss
    want.backward()
    want_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()

    got = training_loss(model, model, kwargs, chunk_size=chunk)
    got.backward()
    assert abs(float(got) - float(want)) <= REL * abs(float(want))
    for name, p in model.named_parameters():
        scale = float(want_grads[name].abs().max()) or 1.0
        assert float((p.grad - want_grads[name]).abs().max()) <= REL * scale, name
