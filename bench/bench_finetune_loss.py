"""The training loss alone, in one process: transformers' full-logits loss against ropectl's chunked loss.

Same SmolLM2-shaped random model (30 layers, vocab 49,152, tied), same tokens, same gradient checkpointing, bf16
autocast on CPU; each side's forward + backward timed alternately (``--reps`` pairs). It isolates the loss from the
rest of a training step (Trainer, data, logging), which ``bench_finetune_speed.py`` measures end to end.

    python bench/bench_finetune_loss.py --lengths 2048,4096 --reps 2
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from ropectl.finetune.loss import training_loss

    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", default="2048,4096")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                      num_attention_heads=9, num_key_value_heads=3, head_dim=64, max_position_embeddings=8192,
                      tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg).train()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    sides = {"plain": lambda ids: model(input_ids=ids, labels=ids, use_cache=False).loss,
             "ropectl": lambda ids: training_loss(model, model, {"input_ids": ids})}
    rows = []
    for length in (int(x) for x in args.lengths.split(",")):
        ids = torch.randint(0, cfg.vocab_size, (1, length))
        times: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(args.reps):
            for name, loss_of in sides.items():
                start = time.perf_counter()
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = loss_of(ids)
                loss.backward()
                model.zero_grad(set_to_none=True)
                times[name].append(round(time.perf_counter() - start, 2))
        rows.append({"length": length, "seconds": times,
                     "speed_ratio_best": round(min(times["plain"]) / min(times["ropectl"]), 3)})
        print(json.dumps(rows[-1]), flush=True)


if __name__ == "__main__":
    main()
