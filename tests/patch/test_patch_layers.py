"""Every way of giving a method option reaches what patch writes or prints, with one precedence.

Layers, lowest first: preset, --config FILE, the -m spec string, typed flags, --set. The expected values
are literals chosen here; the oracle is the config.json written (or the dry-run diff, the --emit flags,
the --json object), read back as plain JSON.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from tests.helpers.checkpoints import tiny_llama

runner = CliRunner()
# One distinct beta_fast per layer, so the winner can be read off the output.
PRESET, CONFIG, SPEC, FLAG, SET = 20.0, 24.0, 16.0, 12.0, 8.0
LAYERS = {
    "preset": ["--preset", "mine"],
    "config": ["--config", "{config}"],
    "spec": ["-m", f"yarn:4,beta_fast={SPEC:g},beta_slow=2"],
    "flag": ["--beta-fast", f"{FLAG:g}"],
    "set": ["--set", f"beta_fast={SET:g}"],
}


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama(tmp_path_factory.mktemp("src") / "llama")


@pytest.fixture
def presets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "presets"
    folder.mkdir()
    (folder / "patch-mine.toml").write_text(
        f'[patch]\nmethod = "yarn"\ntarget_length = 1024\n[patch.options]\nbeta_fast = {PRESET}\n')
    (tmp_path / "mine.toml").write_text(f'[patch]\nmethod = "yarn"\nfactor = 4\nbeta_fast = {CONFIG}\n')
    monkeypatch.setenv("ROPECTL_CONFIG_DIR", str(folder))
    return tmp_path / "mine.toml"


def args_for(layers: tuple[str, ...], config: Path) -> list[str]:
    out = [a.format(config=config) for name in layers for a in LAYERS[name]]
    if "-m" not in out and "--preset" not in out and "--config" not in out:
        out = ["-m", "yarn", "-f", "4", *out]
    return out


def written_values(config: dict, key: str) -> set:
    """``key`` as every reader finds it: v4 rope_scaling and v5 rope_parameters must agree."""
    return {section[key] for section in (config.get("rope_scaling"), config.get("rope_parameters"))
            if isinstance(section, dict) and key in section}


def run(*args: object) -> str:
    result = runner.invoke(app, ["patch", *map(str, args)])
    assert result.exit_code == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize(("layers", "want"), [
    (("preset",), PRESET),
    (("config",), CONFIG),
    (("spec",), SPEC),
    (("flag",), FLAG),
    (("set",), SET),
    (("preset", "config"), CONFIG),
    (("config", "spec"), SPEC),
    (("preset", "spec"), SPEC),
    (("spec", "flag"), FLAG),
    (("flag", "set"), SET),
    (("spec", "set"), SET),
    (("preset", "config", "spec", "flag"), FLAG),
    (("preset", "config", "spec", "flag", "set"), SET),
])
def test_precedence_reaches_the_written_config(llama: Path, presets: Path, tmp_path: Path,
                                                layers: tuple[str, ...], want: float) -> None:
    out = tmp_path / "out"
    data = json.loads(run(llama, *args_for(layers, presets), "-o", out, "--json"))
    config = json.loads((out / "config.json").read_text())
    assert written_values(config, "beta_fast") == {want}
    assert f"beta_fast={want:g}" in data["method"]
    if "spec" in layers:  # a later layer that sets beta_fast leaves the spec's beta_slow alone
        assert written_values(config, "beta_slow") == {2.0}


WINNER = {"preset": PRESET, "config": CONFIG, "spec": SPEC, "flag": FLAG, "set": SET}


@pytest.mark.parametrize("mode", ["output", "in-place", "dry-run", "emit-vllm", "emit-llama.cpp", "json"])
@pytest.mark.parametrize("layers", [(name,) for name in LAYERS] + [("preset", "config", "spec", "flag"), tuple(LAYERS)])
def test_every_output_mode_keeps_the_options(llama: Path, presets: Path, tmp_path: Path, mode: str,
                                             layers: tuple[str, ...]) -> None:
    want = WINNER[layers[-1]]  # the highest layer given wins
    args = args_for(layers, presets)
    if mode == "output":
        run(llama, *args, "-o", tmp_path / "out")
        assert written_values(json.loads((tmp_path / "out" / "config.json").read_text()), "beta_fast") == {want}
    elif mode == "in-place":
        copy = shutil.copytree(llama, tmp_path / "copy")
        run(copy, *args, "--in-place")
        assert written_values(json.loads((copy / "config.json").read_text()), "beta_fast") == {want}
    elif mode == "dry-run":
        # the diff's lines (the warnings after it may quote the vLLM override, which names beta_fast too)
        diff = [line for line in run(llama, *args, "--dry-run").splitlines() if line[:1] in ("+", "-", " ")]
        added = [line for line in diff if '"beta_fast"' in line]
        assert added and all(line.startswith("+") and line.rstrip(",").endswith(f": {want}") for line in added)
    elif mode == "emit-vllm":
        command = run(llama, *args, "--emit", "vllm")
        overrides = json.loads(command.split("--hf-overrides ")[1].split(" --max-model-len")[0].strip("'"))
        assert overrides["rope_parameters"]["beta_fast"] == want
    elif mode == "emit-llama.cpp":
        flags = run(llama, *args, "--emit", "llama.cpp").split()
        assert flags[flags.index("--yarn-beta-fast") + 1] == f"{want:g}"
    else:
        data = json.loads(run(llama, *args, "--dry-run", "--json"))
        assert f"beta_fast={want:g}" in data["method"]
        assert f'"beta_fast": {want}' in data["diff"]


def test_other_option_types_from_a_spec_string(llama: Path, tmp_path: Path) -> None:
    """An int, a bool and another method's floats, each only in the -m spec, all reach config.json."""
    run(llama, "-m", "yarn:2,original_max_position_embeddings=128,truncate=false", "-o", tmp_path / "y")
    config = json.loads((tmp_path / "y" / "config.json").read_text())
    assert written_values(config, "original_max_position_embeddings") == {128}
    assert written_values(config, "truncate") == {False}
    run(llama, "-m", "llama3:4,low_freq_factor=2,high_freq_factor=8", "-o", tmp_path / "l")
    config = json.loads((tmp_path / "l" / "config.json").read_text())
    assert written_values(config, "low_freq_factor") == {2.0} and written_values(config, "high_freq_factor") == {8.0}


def test_truncate_flag_overrides_a_spec_either_way(llama: Path, tmp_path: Path) -> None:
    run(llama, "-m", "yarn:2", "--no-truncate", "-o", tmp_path / "a")
    assert written_values(json.loads((tmp_path / "a" / "config.json").read_text()), "truncate") == {False}
    run(llama, "-m", "yarn:2,truncate=false", "--truncate", "-o", tmp_path / "b")
    assert written_values(json.loads((tmp_path / "b" / "config.json").read_text()), "truncate") in ({True}, set())


def test_a_flag_for_an_option_the_method_lacks_is_refused(llama: Path) -> None:
    result = runner.invoke(app, ["patch", str(llama), "-m", "linear:2", "--beta-fast", "16", "--dry-run"])
    assert result.exit_code != 0 and "has no option 'beta_fast'" in result.stderr


def test_every_registry_option_has_a_flag() -> None:
    """Flags are generated from the registry: each option of each method is a flag of `patch`."""
    from ropectl.rope.methods import METHODS

    result = runner.invoke(app, ["patch", "--help"], env={"COLUMNS": "200"})
    names = {p.name for m in METHODS.values() for p in m.params if p.kind is not bool}
    for name in names:
        assert "--" + name.replace("_", "-") in result.stdout, name
    assert "--no-truncate" in result.stdout


def test_eval_ppl_methods_go_through_the_same_layering(tmp_path: Path) -> None:
    """eval-ppl's -m specs and preset methods (strings or tables) give what patch's layering gives."""
    from ropectl.eval.tasks.ppl.spec import build_spec
    from ropectl.patch.spec import build_choice, method_spec

    table = {"method": "yarn", "factor": 4, "beta_fast": 8}
    spec = build_spec({"methods": ["yarn:2,beta_fast=16", table], "lengths": [64]}, model=str(tmp_path))
    assert [m.label for m in spec.methods] == ["yarn:2,beta_fast=16", "yarn:4,beta_fast=8"]
    assert spec.methods[0] == method_spec(build_choice(spec="yarn:2,beta_fast=16"))
    assert spec.methods[1] == method_spec(build_choice(flags=None, sets=["method=yarn", "factor=4", "beta_fast=8"]))
    flagged = build_spec(None, model=str(tmp_path), methods=["yarn:2,beta_fast=16"], lengths="64")
    assert flagged.methods == spec.methods[:1]
