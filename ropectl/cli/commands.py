"""The command table: what ``ropectl --help`` lists, in one place that imports nothing (cli/entry.py renders the
top-level help from it without click; cli/app.py builds the lazy Typer group from it)."""

from __future__ import annotations

from typing import NamedTuple

HELP = "Inspect, patch, convert and evaluate RoPE scaling of Hugging Face checkpoints."
VERSION_HELP = "Show the version."


class Entry(NamedTuple):
    module: str  # ropectl.cli.<module>, whose register(app) adds the command
    summary: str  # the first sentence of the command's docstring (tests/cli/test_startup.py checks it)


# The commands in the order ``--help`` lists them.
COMMANDS: dict[str, Entry] = {
    "extend": Entry("extend_cmd", "Extend MODEL to --target-length and prove it: plan, zero-shot, search, fine-tune, "
                                  "ship, accept, card."),
    "inspect": Entry("inspect_cmd", "Explain a checkpoint's RoPE: frequencies, wavelengths against the trained "
                                    "context, layout."),
    "patch": Entry("patch_cmd", "Rewrite a checkpoint's RoPE scaling (config.json or GGUF metadata), verified "
                                "against transformers."),
    "convert-layout": Entry("layout_cmd", "Permute q/k projection rows between the interleaved (2i, 2i+1) and "
                                          "half-split (i, i+d/2) RoPE layouts."),
    "eval-ppl": Entry("ppl_cmd", "Perplexity of a model over lengths x RoPE scaling methods, in one run (weights "
                                 "loaded once)."),
    "eval-passkey": Entry("passkey_cmd", "Passkey retrieval (YaRN / LongLoRA prompt) over lengths x depths x RoPE "
                                         "methods, in one run."),
    "eval-tasks": Entry("tasks_cmd", "RULER-style tasks (needle retrieval, variable tracking, common/frequent words, "
                                     "passkey) over lengths x RoPE methods, with 95 % intervals, paired differences "
                                     "against none and each method's effective length."),
    "recommend": Entry("recommend_cmd", "Rank RoPE methods and factors for --target-length, and say how sure: paired "
                                        "task scores and PPL."),
    "report": Entry("report_cmd", "Judge EXTENDED against BASE at --target-length: effective length, retention, one "
                                  "verdict."),
    "finetune": Entry("finetune_cmd", "Patch MODEL's RoPE exactly as `ropectl patch` does, fine-tune it (PoSE by "
                                      "default) and write a checkpoint."),
    "search": Entry("search_cmd", "Search a method's parameters on the model itself, in one Optuna study (LongRoPE's "
                                  "evolution proposes for --space longrope)."),
    "verify": Entry("verify_cmd", "Score MODEL on the same token ids in every engine that will serve it, each "
                                  "against transformers."),
}
