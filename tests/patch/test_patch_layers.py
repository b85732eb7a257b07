"""Every way of giving a method option reaches what patch writes or prints, with one precedence.

Layers, lowest first: preset, --config FILE, then the command line (the -m spec string, typed flags, --set),
which overrides them. Two command-line layers that disagree are refused, naming both. The expected values
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
from tests.helpers.cli import one_line

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
    (("preset", "config", "flag"), FLAG),
    (("preset", "config", "set"), SET),
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
@pytest.mark.parametrize("layers", [(name,) for name in LAYERS] + [("preset", "config", "spec"),
                                                                    ("preset", "config", "set")])
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


def test_truncate_flag_reaches_the_config_and_a_disagreeing_spec_is_refused(llama: Path, tmp_path: Path) -> None:
    run(llama, "-m", "yarn:2", "--no-truncate", "-o", tmp_path / "a")
    assert written_values(json.loads((tmp_path / "a" / "config.json").read_text()), "truncate") == {False}
    one_line(["patch", str(llama), "-m", "yarn:2,truncate=false", "--truncate", "--dry-run"],
             "-m yarn:2,truncate=false", "--truncate True", "truncate")
    run(llama, "-m", "yarn:2,truncate=false", "--no-truncate", "--dry-run")  # the same value twice is fine


@pytest.mark.parametrize(("args", "first", "second"), [
    (["-m", "yarn:4", "-f", "8"], "-m yarn:4", "--factor 8"),
    (["-m", "yarn:4", "--set", "factor=8"], "-m yarn:4", "--set factor=8"),
    (["-m", "yarn", "-f", "2", "--set", "factor=3"], "--factor 2", "--set factor=3"),
    (["-m", "yarn:4,beta_fast=16", "--beta-fast", "24"], "-m yarn:4,beta_fast=16", "--beta-fast 24"),
    (["-m", "yarn:4", "--set", "beta_fast=16", "--beta-fast", "24"], "--beta-fast 24", "--set beta_fast=16"),
    (["-m", "yarn:4", "--set", "method=linear"], "-m yarn:4", "--set method=linear"),
])
def test_command_line_layers_that_disagree_are_refused(llama: Path, args: list[str], first: str, second: str) -> None:
    """`-m yarn:4 -f 8` once wrote factor 8 without a word: both places are named, nothing is written."""
    line = one_line(["patch", str(llama), *args, "--dry-run"], first, second)
    assert "two values of" in line


@pytest.mark.parametrize("args", [["-m", "yarn:4", "-t", "1k"], ["-m", "yarn:4", "--set", "target_length=1024"],
                                  ["-m", "yarn", "-f", "4", "-t", "1k"]])
def test_a_factor_and_a_target_length_are_refused(llama: Path, args: list[str]) -> None:
    line = one_line(["patch", str(llama), *args, "--dry-run"], "factor", "target length")
    assert "yarn:4" in line or "--factor 4" in line


@pytest.mark.parametrize("args", [["-m", "yarn:4", "-f", "4"], ["-m", "yarn:4", "--set", "factor=4.0"],
                                  ["-m", "yarn:4,beta_fast=16", "--beta-fast", "16", "--set", "beta_fast=16"]])
def test_agreeing_layers_are_fine(llama: Path, args: list[str]) -> None:
    """The negative control: equal values given twice write that value."""
    data = json.loads(run(llama, *args, "--dry-run", "--json"))
    assert data["after"]["factor"] == 4


def test_a_preset_stays_a_default_the_command_line_overrides(llama: Path, presets: Path) -> None:
    """A preset's target length gives way to -f (and its beta_fast to --beta-fast): no refusal below the command
    line."""
    data = json.loads(run(llama, "--preset", "mine", "-f", "2", "--beta-fast", "9", "--dry-run", "--json"))
    assert data["after"]["factor"] == 2 and "beta_fast=9" in data["method"]


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
