"""Hub ids go through huggingface_hub's real cache code, offline: HF_HOME and HF_HUB_OFFLINE are honoured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import checkpoints

REVISION = "0123456789abcdef0123456789abcdef01234567"


def hub_cache(home: Path, repo_id: str, build=None) -> Path:
    """The layout huggingface_hub writes: models--owner--name/{blobs/<sha>, snapshots/REV/* -> blobs, refs/main}."""
    return checkpoints.hub_cache(home, repo_id, REVISION, build)


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


def test_fixture_is_a_cache_huggingface_hub_recognises(tmp_path: Path) -> None:
    from huggingface_hub import scan_cache_dir

    snapshot = hub_cache(tmp_path / "hf", "acme/tiny-llama")
    info = scan_cache_dir(tmp_path / "hf" / "hub")
    (repo,) = info.repos
    assert repo.repo_id == "acme/tiny-llama" and [r.commit_hash for r in repo.revisions] == [REVISION]
    assert not info.warnings
    config = snapshot / "config.json"
    assert config.is_symlink() and config.resolve().parent.name == "blobs"


@pytest.mark.parametrize("how", ["hub-id", "snapshot-path"])
def test_convert_layout_of_a_sharded_model_in_the_hub_cache(tmp_path: Path, how: str) -> None:
    snapshot = hub_cache(tmp_path / "hf", "acme/tiny-sharded", checkpoints.tiny_llama_sharded)
    shards = sorted(snapshot.glob("model-*.safetensors"))
    assert len(shards) > 1 and all(p.is_symlink() for p in shards)
    model = "acme/tiny-sharded" if how == "hub-id" else str(snapshot)
    out = tmp_path / "out"
    proc = ropectl(tmp_path / "hf", "convert-layout", model, "--to", "interleaved", "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.glob("model-*.safetensors")) == [p.name for p in shards]
    assert not any(p.is_symlink() for p in out.iterdir())  # the output holds real files, not links into the cache
    assert json.loads(proc.stdout)["tensors_permuted"] == 2 * 4  # 2 layers x q/k weight and bias


@pytest.mark.parametrize("target", ["other-repo-blob", "outside"])
def test_a_snapshot_link_leaving_its_own_blobs_is_still_refused(tmp_path: Path, target: str) -> None:
    """Negative control: only the same cache repo's blobs/ is allowed, not another repo's, not elsewhere."""
    snapshot = hub_cache(tmp_path / "hf", "acme/tiny-sharded", checkpoints.tiny_llama_sharded)
    shard = sorted(snapshot.glob("model-*.safetensors"))[0]
    if target == "other-repo-blob":
        other = tmp_path / "hf" / "hub" / "models--evil--repo" / "blobs"
    else:
        other = tmp_path / "elsewhere"
    other.mkdir(parents=True)
    moved = other / "stolen"
    moved.write_bytes(shard.resolve().read_bytes())
    shard.unlink()
    shard.symlink_to(moved)
    proc = ropectl(tmp_path / "hf", "convert-layout", str(snapshot), "--to", "interleaved", "-o", str(tmp_path / "o"))
    assert proc.returncode == 1 and "outside the checkpoint folder" in proc.stderr, proc.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_patch_output_from_a_sharded_hub_model(tmp_path: Path) -> None:
    snapshot = hub_cache(tmp_path / "hf", "acme/tiny-sharded", checkpoints.tiny_llama_sharded)
    out = tmp_path / "p"
    proc = ropectl(tmp_path / "hf", "patch", "acme/tiny-sharded", "-m", "yarn", "-f", "2", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    for shard in snapshot.glob("model-*.safetensors"):
        assert (out / shard.name).read_bytes() == shard.read_bytes()


def test_a_shard_symlinked_out_of_a_plain_folder_is_refused(tmp_path: Path) -> None:
    """Outside the hub cache no symlink may leave the checkpoint folder, even one into a folder named blobs."""
    folder = checkpoints.tiny_llama_sharded(tmp_path / "model")
    shard = sorted(folder.glob("model-*.safetensors"))[0]
    (tmp_path / "blobs").mkdir()
    moved = shard.rename(tmp_path / "blobs" / "x")
    shard.symlink_to(moved)
    proc = ropectl(tmp_path / "hf", "convert-layout", str(folder), "--to", "interleaved", "-o", str(tmp_path / "o"))
    assert proc.returncode == 1 and "outside the checkpoint folder" in proc.stderr, proc.stderr
