"""--engine llama.cpp before llama.cpp runs: its refusals (one line each) and the parameters it reads from the line
`patch --emit llama.cpp` prints. Fast and without llama-cpp-python: the tiny checkpoint's config stands in for a
GGUF's (the plan reads only the config). The engine itself, on SmolLM2's GGUF against transformers:
tests/compat/test_llama_cpp_engine.py."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ropectl.cli.app import app
from ropectl.errors import EngineError, MethodError, UsageError
from ropectl.eval.engines import get_engine
from ropectl.eval.engines import llama_cpp_plan as plan
from tests.helpers.cli import one_line, runner


def _source(folder: Path, gguf: bool = True) -> Any:
    """The tiny checkpoint's ModelSource, presented as a GGUF (only ``resolved`` says which)."""
    from ropectl.runtime.model import model_source

    real = model_source(str(folder))
    return SimpleNamespace(**{**vars(real), "resolved": SimpleNamespace(is_gguf=gguf, path=Path(folder) / "model.gguf")})


def _state(source: Any, method: str | None) -> Any:
    from ropectl.eval.settings import parse_methods
    from ropectl.runtime.model import method_states

    return method_states(source.config, parse_methods([method]) if method else ())[0]


def test_registered_with_its_capability() -> None:
    engine = get_engine("llama.cpp")
    assert engine.name == "llama.cpp" and engine.cheap_method_switch
    assert not engine.data_parallel and not engine.tensor_parallel


def test_missing_llama_cpp_names_the_install(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llama_cpp" else real(name, *a))
    with pytest.raises(EngineError) as caught:
        get_engine("llama.cpp")(_source(tiny_model), "cpu", "fp32")
    text = str(caught.value)
    assert "\n" not in text and "needs llama-cpp-python" in text
    assert "pip install 'ropectl[llama-cpp]'" in text and plan.PIN in text


def test_a_folder_is_refused_with_the_conversion(tiny_model: Path, isolated: Path) -> None:
    one_line(["eval-ppl", str(tiny_model), "-l", "64", "--engine", "llama.cpp"],
             "loads a GGUF file", "convert_hf_to_gguf.py", code=1)


def test_torchrun_is_refused(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UsageError, match="torchrun"):
        get_engine("llama.cpp")(_source(tiny_model), "cpu", "fp32")


@pytest.mark.parametrize(("method", "why"), [("dynamic:2", "has no dynamic NTK scaling"),
                                             ("llama3:4", "cannot be expressed as llama.cpp flags")])
def test_a_method_llama_cpp_cannot_serve_is_refused(tiny_model: Path, method: str, why: str) -> None:
    source = _source(tiny_model)
    with pytest.raises(MethodError) as caught:
        plan.setting_for(_state(source, method), source, 256)
    text = str(caught.value)
    assert "\n" not in text and f"llama.cpp cannot run method '{method}'" in text and why in text
    assert "Fix:" in text


def _emitted(model: Path, *method: str) -> list[str]:
    result = runner.invoke(app, ["patch", str(model), *method, "--emit", "llama.cpp", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["emit"]["args"]


@pytest.mark.parametrize(("method", "sweep"), [((), None), (("-m", "linear:2"), "linear:2"), (("-m", "ntk:2"), "ntk:2"),
                                              (("-m", "yarn:2"), "yarn:2"),
                                              (("-m", "yarn:2", "--attention-factor", "1.2"), "yarn:2,attention_factor=1.2")])
def test_the_plan_is_the_printed_line(tiny_model: Path, method: tuple[str, ...], sweep: str | None) -> None:
    """Each setting carries exactly the args `patch --emit llama.cpp` prints (the CLI's own JSON), and reads them as
    llama.cpp's arg parser does: --rope-scale S is freq_scale 1/S, --override-kv a model parameter."""
    from ropectl.runtime.model import trained_context

    args = _emitted(tiny_model, *method)
    source = _source(tiny_model)
    setting = plan.setting_for(_state(source, sweep), source, trained_context(source.config))
    assert list(setting.args) == args
    flags = dict(zip(args[::2], args[1::2]))
    assert setting.context["rope_freq_base"] == float(flags["--rope-freq-base"])
    assert setting.context["rope_scaling_type"] == flags["--rope-scaling"]
    if "--rope-scale" in flags:
        assert setting.context["rope_freq_scale"] == pytest.approx(1 / float(flags["--rope-scale"]))
    if "--override-kv" in flags:
        key, value = flags["--override-kv"].split("=")
        assert setting.kv_overrides == {key: float(value.split(":")[1])}
    else:
        assert setting.kv_overrides == {}


def test_flag_reading_refuses_what_it_does_not_know() -> None:
    assert plan.flag_params(["--override-kv", "llama.rope.scaling.attn_factor=float:1.25", "-c", "4096"]) == (
        {"n_ctx": 4096}, {"llama.rope.scaling.attn_factor": 1.25})
    with pytest.raises(EngineError, match="does not read the printed flag '--grp-attn-n'"):
        plan.flag_params(["--grp-attn-n", "4"])


def test_what_patch_prints_beside_the_line_is_kept(tmp_path: Path) -> None:
    """A model with sliding-window layers: patch warns that the flags set only the full-attention RoPE, and the
    setting keeps that note (the engine adds it to the run's warnings)."""
    from tests.helpers.eval_data import build

    source = _source(build("gemma3", tmp_path / "gemma3"))
    setting = plan.setting_for(_state(source, "yarn:2"), source, 256)
    assert any("sliding-window layers keep the GGUF's own base" in note for note in setting.notes)
