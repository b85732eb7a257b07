"""vLLM compat tier: the real vLLM reads ropectl's output, and the printed ``--emit vllm`` overrides, as transformers.

Run on two releases, one per reader entry of ropectl.readers.vllm: 0.32 (the newest) and 0.29 (the last that derives
yarn's length as original_max_position_embeddings x factor), each in its cached venv.

A tiny seeded Llama (trained length 512, head_dim 32 for vLLM's CPU attention, weights std 0.1) is patched with each method to
2x. In the cached vLLM venv (tests/compat/vllm_runner.py, which never imports ropectl) each route must derive a
max length equal to the target and give the same prompt log-probs as transformers on the patched folder
(<= 1e-3 absolute) at 2x the trained length:
- ``folder``: the patched folder, with the override ``patch`` printed when it said vLLM derives another length
  (or to cap linear's, which vLLM multiplies by the factor);
- ``emit``: the unpatched folder with the overrides ``patch --emit vllm`` printed.
Checkpoints that ship a scaling (yarn x2 and llama3 x2 from 512 to 1024, the same weights) go as they are: the line
``patch MODEL --emit vllm`` prints with no -m (the checkpoint as it ships), its overrides parsed from the printed
command, must derive 1024 and give transformers' log-probs of the checkpoint itself.
The prompt is 1023 tokens (vLLM needs one slot for the generated token); transformers runs the same ids plus
one, so its dynamic scaling sees the target length, which is the one length the emitted static form is for.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ropectl_cli import printed_vllm_overrides, ropectl_json  # noqa: E402

from tests.helpers.checkpoints import tiny_llama  # noqa: E402
from tests.helpers.eval_data import add_char_tokenizer  # noqa: E402

CACHE = Path(os.environ.get("ROPECTL_COMPAT_CACHE", Path.home() / ".cache" / "ropectl-compat"))
VENVS = {"0.32.0": CACHE / "vllm", "0.29.0": CACHE / "vllm-0.29"}  # release -> venv (tests/compat/engine_venvs.sh)
TRAINED, TARGET = 512, 1024
METHODS = ("linear:2", "ntk:2", "dynamic:2", "yarn:2", "llama3:2")
ROUTES = ("folder", "emit")
BARE = ("yarn:2", "dynamic:2")  # folders run with no override: yarn serves the target, dynamic is static (predicted)
TOL = 1e-3
# checkpoints that ship a scaling, served as they are (patch --emit vllm without -m)
SHIPPED = {"yarn2-shipped": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0,
                             "original_max_position_embeddings": TRAINED},
           "llama3x2-shipped": {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 2.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": TRAINED}}
SIZES = dict(seed=7, hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32, intermediate_size=128,
             initializer_range=0.1)
_STATE: dict[str, Any] = {}


def _vllm_missing(version: str) -> str | None:
    if not (VENVS[version] / "bin" / "python").exists():
        return (f"no vLLM venv at {VENVS[version]}: run tests/compat/engine_venvs.sh (see "
                "docs/reference/compatibility.md, the engine tiers)")
    return None




def _reference(folder: Path, tokens: list[int]) -> list[float]:
    """transformers' log-probs of tokens[1:n-1] from a forward over all n tokens (fp32)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    ids = torch.tensor(tokens[1:-1])
    return logp[: len(tokens) - 2].gather(1, ids[:, None])[:, 0].tolist()


def _build(work: Path) -> dict[str, Any]:
    import random

    src = add_char_tokenizer(tiny_llama(work / "src", max_position_embeddings=TRAINED, **SIZES))
    tokens = [1] + [random.Random(11 + i).randrange(3, 128) for i in range(TARGET - 1)]
    jobs, refs = [], {"none": _reference(src, tokens)}
    for method in METHODS:
        name = method.replace(":", "")
        out = work / name
        folder = ropectl_json("patch", str(src), "-m", method, "-o", str(out))
        emitted = ropectl_json("patch", str(src), "-m", method, "--emit", "vllm")
        assert emitted["emit"]["max_model_len"] == TARGET
        refs[name] = _reference(out, tokens)
        jobs.append({"name": f"{name}/folder", "model": str(out), "hf_overrides": printed_vllm_overrides(folder["warnings"]),
                     "tokens": tokens[:-1]})
        jobs.append({"name": f"{name}/emit", "model": str(src), "hf_overrides": emitted["emit"]["hf_overrides"],
                     "tokens": tokens[:-1]})
        if method in BARE:
            jobs.append({"name": f"{name}/bare", "model": str(out), "tokens": tokens[:-1]})
    for name, section in SHIPPED.items():
        shipped = add_char_tokenizer(tiny_llama(work / name, rope_parameters=section, max_position_embeddings=TARGET,
                                                **SIZES))
        args = shlex.split(ropectl_json("patch", str(shipped), "--emit", "vllm")["emit"]["command"])  # as printed
        assert args[args.index("--max-model-len") + 1] == str(TARGET)
        refs[name] = _reference(shipped, tokens)
        jobs.append({"name": f"{name}/as-is", "model": args[2], "tokens": tokens[:-1],
                     "hf_overrides": json.loads(args[args.index("--hf-overrides") + 1])})
    return {"jobs": jobs, "refs": refs}


def _run(work: Path, built: dict[str, Any], version: str) -> dict[str, Any]:
    work = work / version
    work.mkdir()
    (work / "jobs.json").write_text(json.dumps(built["jobs"]))
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONWARNINGS": "ignore"}
    env.pop("PYTHONPATH", None)
    runner = Path(__file__).parent / "vllm_runner.py"
    proc = subprocess.run([str(VENVS[version] / "bin" / "python"), str(runner), str(work / "jobs.json"),
                           str(work / "out.json")], capture_output=True, text=True, env=env, timeout=3600)
    if not (work / "out.json").exists():
        raise AssertionError(f"the vLLM runner produced nothing (exit {proc.returncode}): {proc.stderr[-3000:]}")
    return {"refs": built["refs"], "results": json.loads((work / "out.json").read_text()), "work": work.parent,
            "version": version}


@pytest.fixture(scope="module", params=list(VENVS))
def measured(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    version = request.param
    why = _vllm_missing(version)
    if why:
        pytest.skip(why)
    if "build" not in _STATE:  # the patched folders and transformers' log-probs serve every release
        work = tmp_path_factory.mktemp("vllm")
        _STATE["build"] = (work, _build(work))
    if version not in _STATE:
        _STATE[version] = _run(*_STATE["build"], version)
    return _STATE[version]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("method", METHODS)
def test_vllm_reads_as_transformers(method: str, route: str, measured: dict[str, Any]) -> None:
    name = method.replace(":", "")
    got = measured["results"].get(f"{name}/{route}")
    assert got is not None, "the vLLM runner stopped before this job"
    assert got.get("derived_max_model_len") == TARGET, got.get("error") or got
    assert "error" not in got, got["error"]
    ref, logprobs = measured["refs"][name], got["logprobs"]
    assert None not in logprobs, f"vLLM gave {logprobs.count(None)} non-finite log-probs"
    diff = max(abs(a - b) for a, b in zip(logprobs, ref))
    # The check can tell methods apart: q/k weights are initialized large enough (std 0.1) that RoPE moves the
    # log-probs by whole nats, where the default std 0.02 moved them by less than 1e-2.
    unscaled = max(abs(a - b) for a, b in zip(logprobs, measured["refs"]["none"]))
    print(f"vLLM {measured['version']} {method} {route}: max |logprob diff| vs transformers {diff:.2e} over {len(ref)} tokens "
          f"(vs the unpatched model {unscaled:.2f}), {got.get('seconds')} s")
    assert len(logprobs) == len(ref) and diff <= TOL
    assert unscaled > 100 * TOL


@pytest.mark.parametrize("method", BARE)
def test_bare_folder_as_the_reader_module_predicts(method: str, measured: dict[str, Any]) -> None:
    """Without the override, vLLM derives the length ropectl.readers.vllm predicts for its release."""
    from ropectl.readers import vllm

    got = measured["results"][f"{method.replace(':', '')}/bare"]
    folder = json.loads((measured["work"] / method.replace(":", "") / "config.json").read_text())
    reader = vllm.reader_for(measured["version"])
    predicted = vllm.predict(reader, folder).serving_length
    if method.startswith("yarn"):
        # the default write form: 0.30+ take max_position_embeddings (the target) as it stands, 0.29 derives
        # original x factor (the target too); both then compute what transformers does, with no override
        assert got["derived_max_model_len"] == predicted == TARGET
        ref = measured["refs"][method.replace(":", "")]
        assert max(abs(a - b) for a, b in zip(got["logprobs"], ref)) <= TOL
        return
    # 512 x 2 is accepted, but the static table has 512 rows, with the trained base (an independent oracle:
    # causal attention makes each log-prob before 511 that of the unpatched model). Past the table vLLM's CPU
    # kernel reads out of bounds: NaN on one run, finite garbage on another, never the model's log-probs.
    (rope,) = vllm.predict(reader, folder).ropes.values()
    assert got["derived_max_model_len"] == TRAINED * 2 == vllm.derived_length(reader, "llama", rope.with_(
        rope_type="dynamic", scaling={"factor": 2.0}), TRAINED)
    assert predicted == TRAINED
    none, logprobs = measured["refs"]["none"], got["logprobs"]
    head = [abs(a - b) for a, b in zip(logprobs[: TRAINED - 1], none) if a is not None]
    assert len(head) == TRAINED - 1 and max(head) <= TOL
    tail = logprobs[TRAINED:]
    assert None in tail or max(abs(a - b) for a, b in zip(tail, none[TRAINED:])) > 100 * TOL


@pytest.mark.parametrize("name", list(SHIPPED))
def test_vllm_serves_the_checkpoint_as_it_ships(name: str, measured: dict[str, Any]) -> None:
    """`patch MODEL --emit vllm` with no -m: the printed line serves the shipped scaling, at its shipped length."""
    got = measured["results"].get(f"{name}/as-is")
    assert got is not None, "the vLLM runner stopped before this job"
    assert "error" not in got, got["error"]
    assert got.get("derived_max_model_len") == TARGET
    ref, logprobs = measured["refs"][name], got["logprobs"]
    assert None not in logprobs
    diff = max(abs(a - b) for a, b in zip(logprobs, ref))
    unscaled = max(abs(a - b) for a, b in zip(logprobs, measured["refs"]["none"]))  # the scaling is in effect
    print(f"vLLM {measured['version']} {name} as-is: max |logprob diff| vs transformers {diff:.2e} "
          f"(vs unscaled {unscaled:.2f})")
    assert len(logprobs) == len(ref) and diff <= TOL and unscaled > 100 * TOL
