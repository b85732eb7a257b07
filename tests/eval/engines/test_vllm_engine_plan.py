"""--engine vllm without vLLM (the main venv has none): its refusals, one line each, and the plan it would run,
which is exactly what `patch --emit vllm` prints. The engine against real vLLM: tests/compat/test_vllm_engine.py."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from ropectl.errors import MethodError, UsageError
from ropectl.eval.engines import get_engine
from ropectl.eval.engines import vllm_plan as plan
from ropectl.eval.settings import parse_methods
from ropectl.runtime.model import method_states, model_source, trained_context
from tests.helpers.cli import one_line, runner

NO_VLLM = importlib.util.find_spec("vllm") is None


def _emitted(model: Path, method: str) -> dict:
    from ropectl.cli.app import app

    result = runner.invoke(app, ["patch", str(model), "-m", method, "--emit", "vllm", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["emit"]


@pytest.mark.skipif(not NO_VLLM, reason="vLLM is installed in this venv")
def test_missing_vllm_names_the_extra(tiny_model: Path, tiny_corpus: Path, isolated: Path) -> None:
    one_line(["eval-ppl", str(tiny_model), "-d", str(tiny_corpus), "-m", "yarn:2", "-l", "64", "--engine", "vllm"],
             "needs the vllm package", "pip install 'ropectl[vllm]'", code=1)
    assert not (isolated / "runs").exists() or not any((isolated / "runs").iterdir())


def test_parallel_flags_need_the_vllm_engine(tiny_model: Path, isolated: Path) -> None:
    one_line(["eval-ppl", str(tiny_model), "-l", "64", "--tensor-parallel-size", "2"], "the vllm engine", "--engine vllm",
             code=2)
    one_line(["eval-ppl", str(tiny_model), "-l", "64", "--engine", "llama"], "unknown engine 'llama'", code=2)


def test_hf_is_the_transformers_engine() -> None:
    assert get_engine("hf") is get_engine("transformers")


def test_torchrun_refused_before_the_process_group(tiny_model: Path, tiny_corpus: Path, isolated: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")  # no second rank exists: reaching init_process_group would hang
    one_line(["eval-ppl", str(tiny_model), "-d", str(tiny_corpus), "-l", "64", "--engine", "vllm"],
             "torchrun", "--tensor-parallel-size", code=2)


def test_plan_is_the_printed_command(tiny_model: Path) -> None:
    """Static methods run exactly what `patch -m M --emit vllm` prints; dynamic runs the printed static form for
    each length."""
    source = model_source(str(tiny_model))
    methods = ("none", "yarn:2", "linear:2", "llama3:2", "dynamic:2")
    states = method_states(source.config, parse_methods(list(methods)))
    servings = plan.plan_servings(states, source.config, (64, 400, 512), trained_context(source.config))
    for method in ("yarn:2", "linear:2", "llama3:2"):  # trained 256 x 2 = 512, the longest length
        emitted = _emitted(tiny_model, method)
        for n in (64, 400, 512):
            got = servings[(method, n)]
            assert dict(got.hf_overrides) == emitted["hf_overrides"]
            assert got.printed_max_model_len == emitted["max_model_len"] and got.max_model_len == 512
    dynamic = servings[("dynamic:2", 400)]
    assert dynamic.served_as == "dynamic (vLLM: static at 400)" and dynamic.printed_max_model_len == 400
    assert dynamic.max_model_len == 400
    theta = {m: servings[(m, 64)].hf_overrides["rope_parameters"]["rope_theta"] for m in ("none", "dynamic:2")}
    assert theta["dynamic:2"] == theta["none"]  # within the trained context dynamic is the unscaled model
    notes = plan.served_notes(states, servings)
    assert len(notes) == 1 and "400 as static at 400" in notes[0]


def test_longrope_runs_the_printed_overrides_with_the_length_that_picks_its_factors(tmp_path: Path) -> None:
    """vLLM picks LongRoPE's factors per engine from --max-model-len and its attention scaling from
    max_position_embeddings: short factors up to the original length, the configured scaling up to its length."""
    from tests.compat.vllm_engine_support import tiny_phi3_longrope

    source = model_source(str(tiny_phi3_longrope(tmp_path / "phi3")))  # original 128, max_position_embeddings 512
    states = method_states(source.config, ())
    servings = plan.plan_servings(states, source.config, (64, 128, 129, 512, 600), trained_context(source.config))
    got = {n: servings[("as-is", n)] for n in (64, 128, 129, 512, 600)}
    assert [got[n].max_model_len for n in got] == [128, 128, 512, 512, 600]
    assert [_text_max_positions(got[n].hf_overrides) for n in got] == [512, 512, 512, 512, 600]
    assert got[128].served_as == "longrope (vLLM: short factors at 128)" and got[128].printed_max_model_len == 512
    assert got[64].key == got[128].key and got[129].key == got[512].key  # one engine each
    notes = plan.served_notes(states, servings)
    assert len(notes) == 2 and "128 as short factors at 128, 129 as long factors at 512" in notes[0]
    assert "past max_position_embeddings 512" in notes[1]


def _text_max_positions(overrides: dict) -> int:
    return overrides.get("text_config", overrides)["max_position_embeddings"]


def test_tensor_parallel_must_divide_the_heads(tiny_model: Path) -> None:
    config = model_source(str(tiny_model)).config
    heads = config["num_attention_heads"]
    with pytest.raises(UsageError, match=f"does not divide the model's {heads} attention heads"):
        plan.check_heads(config, plan.Parallel(heads + 1))
    plan.check_heads(config, plan.Parallel(1))
    with pytest.raises(UsageError, match="unknown --distributed-executor-backend"):
        plan.parallel_from(type("S", (), {"distributed_executor_backend": "slurm"})())


def test_a_method_vllm_cannot_build_is_refused(tmp_path: Path) -> None:
    from tests.helpers.eval_data import add_char_tokenizer
    from tests.helpers.family_checkpoints import tiny_deepseek_v3

    source = model_source(str(add_char_tokenizer(tiny_deepseek_v3(tmp_path / "ds"))))
    states = method_states(source.config, parse_methods(["yarn:2", "linear:2"]))
    trained = trained_context(source.config)
    plan.plan_servings(states[:1], source.config, (64,), trained)  # yarn: vLLM's DeepSeek file builds it
    with pytest.raises(MethodError, match="vLLM cannot run method 'linear:2'"):
        plan.plan_servings(states, source.config, (64,), trained)


def test_passkey_tasks_and_recommend_take_the_engine_options(tiny_model: Path, tmp_path: Path) -> None:
    one_line(["eval-passkey", str(tiny_model), "-l", "300", "--pipeline-parallel-size", "2"], "the vllm engine", code=2)
    one_line(["eval-tasks", str(tiny_model), "-l", "300", "--distributed-executor-backend", "ray"], "the vllm engine",
             code=2)
    one_line(["recommend", str(tiny_model), "-t", "512", "--ppl", str(tmp_path), "--engine", "vllm"],
             "apply when recommend runs the sweeps", code=2)
