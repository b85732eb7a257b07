"""Where `ropectl patch` spends its time: one fresh process per step, wall-clock by time.perf_counter.

    python bench/bench_patch.py [CONFIG_FOLDER]

Steps: start-up (`--help`), planning without verification, the transformers config load, the import of the
model's modeling module, building the rotary embedding, and the whole `patch --dry-run`. The README's
figures come from this script.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEPS = {
    "import torch": "import torch",
    "transformers AutoConfig.from_pretrained": "from transformers import AutoConfig; AutoConfig.from_pretrained(F)",
    "+ modeling module import": "from transformers import AutoConfig; c = AutoConfig.from_pretrained(F)\n"
                                "from ropectl.patch.verify import rotary_class; rotary_class(c)",
    "+ rotary embedding build": "from transformers import AutoConfig; c = AutoConfig.from_pretrained(F)\n"
                                "from ropectl.patch.verify import rotary_class; rotary_class(c)(c)",
    "plan only (no transformers)": "from ropectl.patch import plan_config; from ropectl.rope.methods import MethodSpec\n"
                                   "import json; plan_config(json.load(open(F + '/config.json')), MethodSpec('yarn', 4.0))",
}
LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 64,
         "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 4096, "rope_theta": 10000.0}


def timed(code: str, folder: str) -> float:
    script = f"import time; t = time.perf_counter(); F = {folder!r}\n{code}\nprint(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def whole(args: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ropectl", *args], capture_output=True, check=True)
    return time.perf_counter() - t


def main() -> None:
    folder = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="ropectl-bench-")
    if len(sys.argv) == 1:
        (Path(folder) / "config.json").write_text(json.dumps(LLAMA))
    repeats = 3
    for name, code in STEPS.items():
        best = min(timed(code, folder) for _ in range(repeats))
        print(f"{name:42s} {best:6.2f} s")
    for label, args in (("ropectl --help", ["--help"]),
                        ("ropectl patch --dry-run (yarn)", ["patch", folder, "-m", "yarn", "-f", "4", "--dry-run"])):
        print(f"{label:42s} {min(whole(args) for _ in range(repeats)):6.2f} s")


if __name__ == "__main__":
    main()
