"""The embedded SmolLM2 GGUF as a Hugging Face folder (bf16 safetensors, tokenizer), dequantized by transformers'
own GGUF loader: what `ropectl search --space longrope` needs, since a GGUF cannot carry per-dimension factors.

    .venv/bin/python bench/dequantize_gguf.py runs/smollm2-hf
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from transformers import AutoTokenizer

    from ropectl.finetune.output_weights import save_dequantized
    from ropectl.runtime.model import default_model_path

    out = Path(sys.argv[1])
    gguf = default_model_path()
    save_dequantized(gguf, out, "bfloat16")  # finetune's adapter layout writes its base the same way
    AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(out)
    config = json.loads((out / "config.json").read_text())
    config.pop("quantization_config", None)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(out)


if __name__ == "__main__":
    main()
