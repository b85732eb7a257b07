"""Hub ids go through huggingface_hub's real cache code, offline: HF_HOME and HF_HUB_OFFLINE are honoured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import factories

REVISION = "0123456789abcdef0123456789abcdef01234567"


def hub_cache(home: Path, repo_id: str) -> Path:
    """The layout huggingface_hub writes: models--owner--name/{refs/main, snapshots/REV/...}."""
    repo = home / "hub" / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(REVISION)
    return factories.tiny_llama(repo / "snapshots" / REVISION)


def ropectl(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    env.pop("HF_HUB_CACHE", None)
    return subprocess.run([sys.executable, "-m", "ropectl", *args], capture_output=True, text=True, env=env, timeout=120)


def test_hub_id_resolves_from_the_cache_offline(tmp_path: Path) -> None:
    snapshot = hub_cache(tmp_path / "hf", "acme/tiny-llama")
    proc = ropectl(tmp_path / "hf", "inspect", "acme/tiny-llama", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    config = json.loads((snapshot / "config.json").read_text())
    assert report["model_type"] == "llama" and report["rope_theta"] == config["rope_parameters"]["rope_theta"]


def test_patched_hub_model_goes_to_output(tmp_path: Path) -> None:
    snapshot = hub_cache(tmp_path / "hf", "acme/tiny-llama")
    before = (snapshot / "config.json").read_bytes()
    proc = ropectl(tmp_path / "hf", "patch", "acme/tiny-llama", "-m", "yarn", "-f", "2", "-o", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "out" / "config.json").read_text())["rope_scaling"]["rope_type"] == "yarn"
    assert (snapshot / "config.json").read_bytes() == before


def test_hub_id_missing_from_the_offline_cache(tmp_path: Path) -> None:
    proc = ropectl(tmp_path / "empty", "inspect", "acme/not-cached")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "not in the local hub cache" in lines[0] and "Fix:" in lines[0], proc.stderr
