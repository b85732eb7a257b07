#!/bin/sh
# `ropectl finetune` against a plain transformers Trainer on one GPU: a random-init SmolLM2-shaped model (no weights to
# carry), bf16, one sequence of 8k and of 16k tokens per step, gradient checkpointing on both sides; tokens/s, peak
# CUDA memory and MFU (PaLM's model FLOPs over the card's dense bf16 peak) into $OUT/gpu_finetune.json.
# Self-contained: run from the repository root, e.g. with the device tool:
#   sh bench/gpu_finetune.sh                  # $OUT is set by the device tool; else /tmp/ropectl-gpu
# It needs torch with CUDA plus transformers, accelerate, safetensors, tokenizers, typer, rich, numpy, pyarrow (the
# corpus reader). Missing ones are installed from bench/wheels/ (fill it here with `make gpu-wheels` and carry it:
# the GPU machine has no internet). Budget: about 4-5 minutes on an H100 (2 lengths x 2 sides x 6 steps, each side
# in its own process); the timeout below stops it before 6.
set -eu
OUT=${OUT:-/tmp/ropectl-gpu}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
NEED="transformers accelerate safetensors tokenizers typer rich numpy pyarrow"
MISSING=$($PY - "$NEED" <<'EOF'
import importlib.util, sys
print(" ".join(m for m in sys.argv[1].split() if importlib.util.find_spec(m) is None))
EOF
)
if [ -n "$MISSING" ]; then
    echo "installing from bench/wheels: $MISSING"
    $PY -m pip install -q --no-index --find-links bench/wheels $MISSING
fi
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, \
torch.cuda.get_device_name())" | tee "$OUT/versions.txt"
PYTHONPATH=$PWD timeout 340 $PY bench/bench_finetune_speed.py --device cuda --dtype bf16 --lengths 8192,16384 \
    --steps 6 --out "$OUT/gpu_finetune.json" 2>&1 | tee "$OUT/gpu_finetune.log"
