"""The shipped presets load (from a clone, an editable install and a wheel), and a broken TOML file is a one-line
usage error."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest

from ropectl.errors import UsageError
from ropectl.patch.spec import build_choice, list_presets, method_spec
from ropectl.presets import load_toml_table, presets_dir

REPO = Path(__file__).resolve().parents[2]


def names(prefix: str) -> list[str]:
    return sorted(p.stem.removeprefix(prefix) for p in (REPO / "configs").glob(f"{prefix}*.toml"))


def card_presets() -> list[str]:
    """The presets the model-card files define, read here with tomllib (ropectl.families.cards generates them)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    files = (REPO / "ropectl" / "families" / "cards").glob("*.toml")
    return [r["preset"] for f in files for r in tomllib.loads(f.read_text()).get("recipe", [])]


def patch_presets() -> list[str]:
    return sorted([*names("patch-"), *card_presets()])


def test_presets_live_in_configs() -> None:
    """configs/ is the package ropectl.configs; the editable install maps it onto the repository's folder."""
    import ropectl.configs

    assert presets_dir() == REPO / "configs" == Path(ropectl.configs.__file__).parent
    assert list_presets() == patch_presets() and "qwen3-128k" in card_presets()


def test_config_dir_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "patch-mine.toml").write_text('[patch]\nmethod = "linear"\nfactor = 2\n')
    monkeypatch.setenv("ROPECTL_CONFIG_DIR", str(tmp_path))
    assert presets_dir() == tmp_path and list_presets() == sorted(["mine", *card_presets()])
    assert method_spec(build_choice(preset="mine")).name == "linear"


def test_package_list_covers_the_tree() -> None:
    """pyproject.toml lists packages by hand (the configs/ mapping needs it): a new subpackage must be added there."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    setuptools = pytest.importorskip("setuptools")
    table = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert table["package-dir"] == {"ropectl.configs": "configs"}
    assert table["package-data"] == {"ropectl.configs": ["*.toml"], "ropectl.families": ["cards/*.toml"]}
    found = setuptools.find_packages(str(REPO), include=["ropectl", "ropectl.*"])
    assert sorted(table["packages"]) == sorted([*found, "ropectl.configs"])


@pytest.mark.parametrize("name", patch_presets())
def test_every_patch_preset_builds_a_method(name: str) -> None:
    spec = method_spec(build_choice(preset=name))
    assert spec.name in {"linear", "ntk", "dynamic", "yarn", "llama3", "longrope"}


def test_bad_toml_and_non_table(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[patch\nmethod = ")
    with pytest.raises(UsageError, match="not valid TOML"):
        load_toml_table(bad, "patch")
    flat = tmp_path / "flat.toml"
    flat.write_text('patch = "yarn"\n')
    with pytest.raises(UsageError, match=r"'\[patch\]' .* is not a table"):
        load_toml_table(flat, "patch")
    with pytest.raises(UsageError, match="cannot read"):
        load_toml_table(tmp_path / "missing.toml", "patch")


def test_preset_for_another_trained_context_is_said(tmp_path: Path) -> None:
    """R-19: llama2-4k-16k-yarn on a model trained at 256 writes original 4096; the summary must say so."""
    import json

    from typer.testing import CliRunner

    from ropectl.cli.app import app
    from tests.helpers.checkpoints import write_config

    def warnings(context: int) -> list[str]:
        cfg = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
               "max_position_embeddings": context, "rope_theta": 10000.0}
        folder = write_config(tmp_path / str(context), cfg)
        result = CliRunner().invoke(app, ["patch", str(folder), "--preset", "llama2-4k-16k-yarn", "--dry-run", "--json"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert data["target_context"] == 16384  # what the preset asks is still written: 4 x 4096
        return [w for w in data["warnings"] if w.startswith("original_max_position_embeddings")]

    assert any("4,096" in w and "trained context 256" in w for w in warnings(256))
    assert warnings(4096) == []  # negative control: the model the preset was written for


def wheel_venv(tmp: Path) -> Path:
    """A fresh virtualenv holding ropectl only as installed from a wheel built here (no network).

    The dependencies (torch, transformers, ...) come from this interpreter's site-packages through a .pth file;
    a .pth line only appends a folder to sys.path, so the editable install's finder there is never run and the
    venv's own site-packages, the wheel's, comes first.
    """
    pytest.importorskip("setuptools")  # --no-build-isolation builds with this interpreter's setuptools
    src = tmp / "src"  # a copy: the build's build/ and egg-info stay out of the repository
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for name in ("ropectl", "configs"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(tmp / "dist"), str(src)],
                   check=True, capture_output=True, text=True)
    (wheel,) = (tmp / "dist").glob("ropectl-*.whl")
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    subprocess.run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, text=True)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    deps = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (Path(purelib) / "_ropectl_test_deps.pth").write_text("".join(f"{p}\n" for p in deps))
    return env_dir


@pytest.mark.slow
def test_presets_work_from_a_wheel(tmp_path: Path) -> None:
    """Built, installed into a fresh venv and run from outside the repository: the presets come with the wheel.

    Negative control: with the .toml files removed from the installed package, the same commands fail with the
    one-line unknown-preset error. ``--preset default`` of eval-ppl is embedded in the code (eval-default.toml says
    the same), so it works either way and cannot show the files are there; the named presets do.
    """
    started = time.monotonic()
    env_dir = wheel_venv(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    model = elsewhere / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 8192, "rope_theta": 500000.0}))
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "ROPECTL_CONFIG_DIR", "VIRTUAL_ENV"}}
    env |= {"PYTHONNOUSERSITE": "1", "HF_HUB_OFFLINE": "1", "PATH": f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"}

    def run(*args: str, exe: str = "ropectl") -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(env_dir / "bin" / exe), *args], cwd=elsewhere, env=env, capture_output=True, text=True)

    where = run("-c", "import ropectl, ropectl.presets as p; print(ropectl.__file__); print(p.presets_dir())", exe="python")
    assert where.returncode == 0, where.stderr
    package, folder = (Path(line) for line in where.stdout.split())
    assert package.is_relative_to(env_dir) and folder.is_relative_to(env_dir), where.stdout  # not the source tree
    shipped = folder

    def unknown(command: str, name: str) -> str:
        result = run(*command.split(), "--preset", name)
        assert result.returncode == 2 and result.stdout == "", result
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"error: unknown preset '{name}'"), line
        return line

    def checks() -> None:
        patched = run("patch", "model", "--preset", "llama3-8k-32k", "--dry-run", "--json")
        assert patched.returncode == 0, patched.stderr
        assert json.loads(patched.stdout)["target_context"] == 32768
        for name in ("default", "sliding"):  # the preset resolves; the missing model is the one-line error then
            result = run("eval-ppl", "no-model", "--preset", name)
            assert result.returncode == 1 and "model 'no-model' not found" in result.stderr, result
        assert f"use one of: {', '.join(patch_presets())};" in unknown("patch model", "no-such")
        assert f"use one of: {', '.join(names('eval-'))}, or" in unknown("eval-ppl", "no-such")

    checks()
    removed = [path.name for path in shipped.glob("*.toml")]
    assert sorted(removed) == sorted(p.name for p in (REPO / "configs").glob("*.toml"))
    for name in removed:
        (shipped / name).unlink()
    unknown("patch model --dry-run", "llama3-8k-32k")
    unknown("eval-ppl no-model", "sliding")
    # the model-card presets came with the wheel (ropectl/families/cards/*.toml), not with configs/
    assert f"use one of: {', '.join(sorted(card_presets()))};" in unknown("patch model", "no-such")
    assert "use one of: default, or" in unknown("eval-ppl", "no-such")
    default = run("eval-ppl", "no-model", "--preset", "default")  # embedded: still resolves without the file
    assert default.returncode == 1 and "model 'no-model' not found" in default.stderr, default
    print(f"wheel preset check: {time.monotonic() - started:.1f} s")
