"""Where `ropectl patch` spends its time: one fresh process per step, wall-clock by time.perf_counter.

    python bench/bench_patch.py [CONFIG_FOLDER] [--gguf=FILE.gguf] [--commands-only]

Steps: start-up (`--help`), planning without verification, the transformers config load, the import of the
model's modeling module, building the rotary embedding; then whole commands: inspect, `patch -o`,
`--dry-run` and `--emit`, on the folder and on a GGUF. The best of 3 runs; docs/reference/benchmarks.md's figures come from it.
"""

from __future__ import annotations

import json
import resource
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


def whole(args: list[str], cwd: str) -> tuple[float, float]:
    """(wall, CPU) seconds of one fresh process. CPU time (user + sys) moves far less than wall time when other
    jobs share the cores, so it is the figure to compare across runs on a loaded machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ropectl", *args], capture_output=True, check=True, cwd=cwd)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def commands(folder: str, gguf: str | None) -> dict[str, list[str]]:
    """The user-facing modes of patch, on the config folder and (if given) a GGUF; -o targets a fresh path each run."""
    out = {"ropectl --help": ["--help"],
           "inspect": ["inspect", folder],
           "patch -o (yarn)": ["patch", folder, "-m", "yarn", "-f", "4", "-o", "{out}"],
           "patch --dry-run (yarn)": ["patch", folder, "-m", "yarn", "-f", "4", "--dry-run"],
           "patch --emit vllm (yarn)": ["patch", folder, "-m", "yarn", "-f", "4", "--emit", "vllm"]}
    if gguf:
        out.update({"GGUF inspect": ["inspect", gguf],
                    "GGUF patch -o (yarn)": ["patch", gguf, "-m", "yarn", "-f", "2", "-o", "{out}.gguf"],
                    "GGUF patch --dry-run (yarn)": ["patch", gguf, "-m", "yarn", "-f", "2", "--dry-run"],
                    "GGUF patch --emit llama.cpp": ["patch", gguf, "-m", "yarn", "-f", "2", "--emit", "llama.cpp"]})
    return out


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    gguf = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--gguf=")), None)
    folder = args[0] if args else tempfile.mkdtemp(prefix="ropectl-bench-")
    if not args:
        (Path(folder) / "config.json").write_text(json.dumps(LLAMA))
    repeats = 3
    with open("/proc/loadavg") as fh:
        print(f"load average before: {fh.read().split()[0]}")
    for name, code in STEPS.items() if "--commands-only" not in sys.argv else ():
        best = min(timed(code, folder) for _ in range(repeats))
        print(f"{name:42s} {best:6.2f} s")
    work = tempfile.mkdtemp(prefix="ropectl-bench-out-")
    for label, argv in commands(str(Path(folder).resolve()), gguf).items():
        runs = [whole([a.replace("{out}", f"out{i}") for a in argv], work) for i in range(repeats)]
        print(f"{label:42s} {min(r[0] for r in runs):6.2f} s wall {min(r[1] for r in runs):6.2f} s CPU")
    with open("/proc/loadavg") as fh:
        print(f"load average after: {fh.read().split()[0]}")


if __name__ == "__main__":
    main()
