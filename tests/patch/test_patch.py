"""`ropectl patch` on tiny checkpoints: every method x architecture loads in transformers as intended."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from ropectl.rope.frequencies import compute_frequencies, ntk_theta
from ropectl.rope.params import RopeParams
from tests.helpers.checkpoints import tiny_gemma3, tiny_llama, tiny_neox, tiny_phi3, tiny_qwen2

runner = CliRunner()
ARCHS = {"llama": tiny_llama, "qwen2": tiny_qwen2, "neox": tiny_neox, "gemma3": tiny_gemma3, "phi3": tiny_phi3}
METHODS = ("linear", "ntk", "dynamic", "yarn", "llama3", "longrope")
# transformers' Phi3Config accepts only default and longrope (it rewrites yarn to longrope).
PHI3_OK = ("ntk", "longrope")


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("src")
    return {name: build(root / name) for name, build in ARCHS.items()}


def invoke(*args: str) -> tuple[int, dict | None, str]:
    result = runner.invoke(app, ["patch", *map(str, args)])
    data = json.loads(result.stdout) if result.exit_code == 0 and "--json" in args else None
    return result.exit_code, data, result.stderr


def source_info(folder: Path) -> tuple[dict, int, float, int]:
    """(config, rotary dim, base theta of full attention, trained context) of a tiny checkpoint."""
    from ropectl.schema import read_model_rope

    cfg = json.loads((folder / "config.json").read_text())
    model = read_model_rope(cfg)
    return cfg, model.rotary_dim, model.rope.rope_theta, model.rope.max_position_embeddings


def method_args(method: str, rotary_dim: int) -> list[str]:
    args = ["-m", method, "-f", "4"]
    if method == "longrope":
        n = rotary_dim // 2
        long = ",".join(f"{1 + i / n * 3:.3f}" for i in range(n))
        args += ["--short-factor", ",".join(["1.0"] * n), "--long-factor", long]
    return args


def expected_rope(method: str, theta: float, dim: int, trained: int, args: list[str]) -> RopeParams:
    """What the method means, written out here independently of the registry."""
    if method == "ntk":
        return RopeParams("default", ntk_theta(theta, 4.0, dim), dim, trained * 4, {})
    scaling: dict = {"factor": 4.0}
    if method in ("yarn", "llama3", "longrope"):
        scaling["original_max_position_embeddings"] = trained
    if method == "llama3":
        scaling.update(low_freq_factor=1.0, high_freq_factor=4.0)
    if method == "longrope":
        scaling["short_factor"] = [float(v) for v in args[args.index("--short-factor") + 1].split(",")]
        scaling["long_factor"] = [float(v) for v in args[args.index("--long-factor") + 1].split(",")]
    # The write form (docs, "The write form"): only dynamic keeps the trained length; with --max-positions trained
    # yarn and linear keep it too.
    legacy = "--max-positions" in args and args[args.index("--max-positions") + 1] == "trained"
    max_pos = trained if method == "dynamic" or legacy and method in ("linear", "yarn") else trained * 4
    return RopeParams(method, theta, dim, max_pos, scaling)


def transformers_inv_freq(folder: Path, layer: str | None) -> tuple[list[float], float]:
    """transformers' own computation from the reloaded config (ROPE_INIT_FUNCTIONS / default RoPE)."""
    import torch
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = AutoConfig.from_pretrained(folder)
    params = config.rope_parameters[layer] if layer else config.rope_parameters
    kwargs = {"layer_type": layer} if layer else {}
    if params["rope_type"] != "default":
        inv, attention = ROPE_INIT_FUNCTIONS[params["rope_type"]](config, None, **kwargs)
        return inv.double().tolist(), float(attention)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dim = int(head_dim * params.get("partial_rotary_factor", 1.0))
    inv = 1.0 / (params["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
    return inv.double().tolist(), 1.0


def assert_close(got: list[float], want: tuple[float, ...]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert math.isclose(g, w, rel_tol=1e-5), (got, want)


def check_v4_form(cfg: dict, arch: str, rope: RopeParams) -> None:
    theta_key = "rotary_emb_base" if arch == "neox" else "rope_theta"
    assert cfg[theta_key] == pytest.approx(rope.rope_theta)
    legacy, modern = cfg.get("rope_scaling"), cfg["rope_parameters"]
    if arch == "gemma3":
        modern = modern["full_attention"]
        assert cfg["rope_local_base_freq"] == 10000.0
    if rope.rope_type == "default":
        assert legacy is None
    elif arch == "phi3":  # Phi3Config 4.x demands exactly these keys; the original length is top-level
        assert set(legacy) == {"type", "short_factor", "long_factor"} and legacy["type"] == rope.rope_type
        assert cfg["original_max_position_embeddings"] == rope.original_max_position_embeddings
    elif arch == "neox" and rope.rope_type in ("linear", "dynamic"):  # GPTNeoXConfig 4.43: two keys
        assert legacy == {"type": rope.rope_type, "factor": 4.0}
    else:
        assert legacy["rope_type"] == legacy["type"] == rope.rope_type
        assert isinstance(legacy["factor"], float) and "rope_theta" not in legacy
        # yarn leaves out an original length equal to max_position_embeddings (4.51-4.55 would derive the factor):
        # the --max-positions trained form; the default names the original in both forms
        same = {k: v for k, v in modern.items() if k not in ("rope_theta", "partial_rotary_factor")}
        if rope.rope_type == "yarn" and cfg["max_position_embeddings"] == rope.original_max_position_embeddings:
            assert "original_max_position_embeddings" not in legacy
            assert same.pop("original_max_position_embeddings") == cfg["max_position_embeddings"]
        elif rope.rope_type == "yarn":
            assert legacy["original_max_position_embeddings"] == rope.original_max_position_embeddings
        assert same == {k: v for k, v in legacy.items() if k != "type"}
    assert modern["rope_theta"] == pytest.approx(rope.rope_theta)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("arch", ARCHS)
def test_method_on_architecture(ckpts: dict[str, Path], tmp_path: Path, arch: str, method: str) -> None:
    check_method(ckpts, tmp_path, arch, method)


@pytest.mark.parametrize("method", ("linear", "yarn"))
@pytest.mark.parametrize("arch", ARCHS)
def test_trained_form_on_architecture(ckpts: dict[str, Path], tmp_path: Path, arch: str, method: str) -> None:
    """--max-positions trained: the earlier form (for transformers 4.43-4.50), read the same by transformers."""
    check_method(ckpts, tmp_path, arch, method, "--max-positions", "trained")


def check_method(ckpts: dict[str, Path], tmp_path: Path, arch: str, method: str, *extra: str) -> None:
    src = ckpts[arch]
    _, dim, theta, trained = source_info(src)
    args = [*method_args(method, dim), *extra]
    out = tmp_path / "out"
    code, data, err = invoke(src, *args, "-o", out, "--json")
    if arch == "phi3" and method not in PHI3_OK:
        assert code == 2 and "accepts only rope types" in err and len(err.strip().splitlines()) == 1
        assert not out.exists()
        return
    assert code == 0, err
    rope = expected_rope(method, theta, dim, trained, args)
    cfg = json.loads((out / "config.json").read_text())
    check_v4_form(cfg, arch, rope)
    assert cfg["max_position_embeddings"] == rope.max_position_embeddings
    layer = "full_attention" if arch == "gemma3" else None
    inv, attention = transformers_inv_freq(out, layer)
    ours = compute_frequencies(rope)
    assert_close(inv, ours.inv_freq)
    assert attention == pytest.approx(ours.attention_factor, rel=1e-6)
    if arch == "gemma3":  # sliding-window layers keep their local base
        local_inv, _ = transformers_inv_freq(out, "sliding_attention")
        assert_close(local_inv, compute_frequencies(RopeParams("default", 1e4, dim, None)).inv_freq)
    assert data["verification"]["max_rel_error"] <= 1e-5
    assert (out / "model.safetensors").stat().st_ino == (src / "model.safetensors").stat().st_ino
    base = {"rope_theta": theta, "max_position_embeddings": trained, "trained_context": trained}
    assert cfg["ropectl"]["base"] == base


@pytest.mark.parametrize("arch,method", [("llama", "yarn"), ("qwen2", "llama3"), ("neox", "linear"),
                                         ("gemma3", "yarn"), ("phi3", "longrope")])
def test_patched_model_loads_and_runs(ckpts: dict[str, Path], tmp_path: Path, arch: str, method: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    src = ckpts[arch]
    _, dim, theta, trained = source_info(src)
    args = method_args(method, dim)
    code, _, err = invoke(src, *args, "-o", tmp_path / "out")
    assert code == 0, err
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    rotary = next(m for name, m in model.named_modules() if name.endswith("rotary_emb"))
    inv = getattr(rotary, "inv_freq", None)
    inv = inv if inv is not None else rotary.full_attention_inv_freq
    assert_close(inv.double().tolist(), compute_frequencies(expected_rope(method, theta, dim, trained, args)).inv_freq)
    ids = torch.arange(12).unsqueeze(0)
    with torch.no_grad():
        logits = model(ids).logits
        source = AutoModelForCausalLM.from_pretrained(src).eval()
        unpatched = source(ids).logits
        # Oracle: the untouched source model with the formula's frequencies put into its rotary module.
        want_inv, want_attention = reference_rope(method, theta, dim, trained, args)
        reference = with_rotary(source, want_inv, want_attention)(ids).logits
    torch.testing.assert_close(logits, reference, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(logits, unpatched, rtol=1e-4, atol=1e-5)  # negative control: patching changed it


def reference_rope(method: str, theta: float, dim: int, trained: int, args: list[str]) -> tuple[list[float], float]:
    from tests.helpers import rope_reference

    if method == "longrope":
        short = [float(v) for v in args[args.index("--short-factor") + 1].split(",")]
        return rope_reference.longrope_short(theta, dim, short, 4.0, trained)
    return rope_reference.expected(method, theta, dim, 4.0, trained, {})


def with_rotary(model, inv: list[float], attention: float):
    """``model`` with every rotary module's (full-attention) frequencies and scaling replaced."""
    import torch

    for module in model.modules():
        if not type(module).__name__.endswith("RotaryEmbedding"):
            continue
        prefix = "full_attention_" if hasattr(module, "full_attention_inv_freq") else ""
        for name in ("inv_freq", "original_inv_freq"):
            if hasattr(module, prefix + name):
                getattr(module, prefix + name).copy_(torch.tensor(inv, dtype=torch.float64))
        setattr(module, prefix + "attention_scaling", attention)
    return model


def test_patch_twice_replaces_instead_of_stacking(ckpts: dict[str, Path], tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    assert invoke(ckpts["llama"], "-m", "yarn", "-f", "4", "-o", first)[0] == 0
    code, data, err = invoke(first, "-m", "linear", "-f", "2", "-o", second, "--json")
    assert code == 0, err
    cfg = json.loads((second / "config.json").read_text())
    # linear writes the target, from the trained length 256, not from the yarn folder's 1024
    assert cfg["rope_scaling"]["factor"] == 2.0 and cfg["max_position_embeddings"] == 512
    assert data["composed_from_record"] and data["before"]["factor"] == 4.0
    back = tmp_path / "c"
    assert invoke(second, "-m", "none", "-o", back)[0] == 0
    cfg = json.loads((back / "config.json").read_text())
    assert "rope_scaling" not in cfg and cfg["max_position_embeddings"] == 256


def test_record_keeps_other_keys(ckpts: dict[str, Path], tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    cfg = json.loads((ckpts["llama"] / "config.json").read_text())
    cfg["ropectl"] = {"layout": "half-split", "layout_source": "test"}
    (src / "config.json").write_text(json.dumps(cfg))
    assert invoke(src, "-m", "yarn", "-f", "2", "--in-place")[0] == 0
    record = json.loads((src / "config.json").read_text())["ropectl"]
    assert record["layout"] == "half-split" and record["method"] == "yarn:2" and record["base"]["rope_theta"] == 1e4


def test_scaled_without_record_needs_replace_existing(ckpts: dict[str, Path], tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    cfg = json.loads((ckpts["llama"] / "config.json").read_text())
    cfg["rope_parameters"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    (src / "config.json").write_text(json.dumps(cfg))
    code, _, err = invoke(src, "-m", "yarn", "-f", "4", "-o", tmp_path / "out")
    assert code == 1 and "--replace-existing" in err and not (tmp_path / "out").exists()
    code, data, err = invoke(src, "-m", "yarn", "-f", "4", "-o", tmp_path / "out", "--replace-existing", "--json")
    assert code == 0, err
    assert data["after"]["factor"] == 4.0 and data["trained_context"] == 256


def test_in_place_keeps_backup(ckpts: dict[str, Path], tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    original = (ckpts["qwen2"] / "config.json").read_text()
    (src / "config.json").write_text(original)
    os.chmod(src / "config.json", 0o644)
    code, data, err = invoke(src, "-m", "dynamic", "-f", "2", "--in-place", "--json")
    assert code == 0, err
    assert (src / "config.json.bak").read_text() == original
    assert json.loads((src / "config.json").read_text())["rope_scaling"]["rope_type"] == "dynamic"
    assert (src / "config.json").stat().st_mode & 0o777 == 0o644
    assert data["backup"].endswith("config.json.bak")
    assert invoke(src, "-m", "dynamic", "-f", "3", "--in-place")[0] == 0  # a second backup gets a timestamp
    assert len(list(src.glob("config.json*.bak"))) == 2


def test_dry_run_prints_diff_and_writes_nothing(ckpts: dict[str, Path]) -> None:
    before = sorted(p.name for p in ckpts["llama"].iterdir())
    config = (ckpts["llama"] / "config.json").read_text()
    result = runner.invoke(app, ["patch", str(ckpts["llama"]), "-m", "yarn", "-f", "4", "--dry-run"])
    assert result.exit_code == 0, result.stderr
    assert "--- a/config.json" in result.stdout and '+    "rope_type": "yarn",' in result.stdout
    assert sorted(p.name for p in ckpts["llama"].iterdir()) == before
    assert (ckpts["llama"] / "config.json").read_text() == config


def test_copy_forces_copies(ckpts: dict[str, Path], tmp_path: Path) -> None:
    code, data, _ = invoke(ckpts["llama"], "-m", "linear", "-f", "2", "-o", tmp_path / "out", "--copy", "--json")
    assert code == 0
    assert {f["how"] for f in data["files"]} == {"written", "copy"}
    copied = (tmp_path / "out" / "model.safetensors").stat()
    assert copied.st_ino != (ckpts["llama"] / "model.safetensors").stat().st_ino


def test_summary_pairs_and_target(ckpts: dict[str, Path]) -> None:
    code, data, _ = invoke(ckpts["llama"], "-m", "linear", "-t", "1024", "--dry-run", "--json")
    assert code == 0
    assert data["pairs"] == {"interpolated": 8, "kept": 0, "blended": 0, "total": 8}
    assert data["trained_context"] == 256 and data["target_context"] == 1024 and data["method"] == "linear:4"
    code, data, _ = invoke(ckpts["llama"], "-m", "yarn", "-f", "4", "--dry-run", "--json")
    pairs = data["pairs"]
    assert pairs["kept"] > 0 and pairs["interpolated"] > 0
    assert sum(pairs[k] for k in ("kept", "interpolated", "blended")) == 8
    assert data["after"]["attention_factor"] == pytest.approx(0.1 * math.log(4) + 1)


def test_v5_schema_drops_legacy_keys(ckpts: dict[str, Path], tmp_path: Path) -> None:
    code, _, err = invoke(ckpts["llama"], "-m", "yarn", "-f", "2", "-o", tmp_path / "v5", "--schema", "v5")
    assert code == 0, err
    cfg = json.loads((tmp_path / "v5" / "config.json").read_text())
    assert "rope_scaling" not in cfg and "rope_theta" not in cfg and cfg["rope_parameters"]["rope_type"] == "yarn"
    code, _, err = invoke(ckpts["llama"], "-m", "yarn", "-f", "2", "-o", tmp_path / "v4", "--schema", "v4")
    assert code == 0, err
    cfg = json.loads((tmp_path / "v4" / "config.json").read_text())
    assert "rope_parameters" not in cfg and cfg["rope_scaling"]["type"] == "yarn"


def test_presets_and_config_file(ckpts: dict[str, Path], tmp_path: Path) -> None:
    code, data, err = invoke(ckpts["qwen2"], "--preset", "qwen2.5-128k",
                             "--original-max-position-embeddings", "512", "--dry-run", "--json")
    assert code == 0, err
    assert data["method"].startswith("yarn:4") and data["target_context"] == 2048
    toml = tmp_path / "mine.toml"
    toml.write_text('[patch]\nmethod = "yarn"\ntarget_length = 1024\nbeta_fast = 16\n')
    code, data, err = invoke(ckpts["llama"], "--config", toml, "--set", "beta_slow=2", "--dry-run", "--json")
    assert code == 0, err
    assert data["method"] == "yarn:4,beta_fast=16,beta_slow=2"
    code, data, _ = invoke(ckpts["llama"], "--config", toml, "-f", "2", "--dry-run", "--json")
    assert data["target_context"] == 512  # a flag's factor overrides the file's target length


def test_transformers_warning_during_verification_is_reported(ckpts: dict[str, Path], tmp_path: Path) -> None:
    """Phi-3 longrope without a factor key makes transformers 5 warn; patch must pass that on, every time."""
    from transformers import __version__

    n = source_info(ckpts["phi3"])[1] // 2
    args = ["-m", "longrope", "-f", "4", "--short-factor", ",".join(["1.0"] * n), "--long-factor", ",".join(["2.0"] * n)]
    for out in (tmp_path / "a", tmp_path / "b"):  # twice: transformers' warning_once must not hide the second
        code, data, err = invoke(ckpts["phi3"], *args, "-o", out, "--json")
        assert code == 0, err
        said = [w for w in data["warnings"] if w.startswith(f"transformers {__version__} warned")]
        assert said and "original_max_position_embeddings" in said[0]
        assert data["verification"]["warnings"] == said


def test_non_integer_yarn_factor_reads_the_same_everywhere(ckpts: dict[str, Path], tmp_path: Path) -> None:
    """-f 3.3: no version may derive another factor from max_position_embeddings / original."""
    out = tmp_path / "out"
    code, data, err = invoke(ckpts["llama"], "-m", "yarn", "-f", "3.3", "-o", out, "--max-positions", "trained",
                             "--json")
    assert code == 0, err
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["max_position_embeddings"] == 256 and "original_max_position_embeddings" not in cfg["rope_scaling"]
    assert data["target_context"] == round(256 * 3.3)
    readers = {r["reader"]: r for r in data["readers"]}
    # 4.43 sizes the rotary embedding from hidden_size / heads (48 / 8), not head_dim 16: that alone differs.
    old = readers.pop("transformers 4.43 to <4.45")
    assert not old["agrees"] and "3 frequencies instead of 8" in old["differs"]
    assert len(readers) >= 6 and all(r["agrees"] for r in readers.values() if r["engine"] == "transformers")
    assert [w for w in data["warnings"] if w.startswith("transformers")] == [
        f"transformers 4.43 to <4.45: {old['differs']}" + (f"; fix: {old['fix']}" if old["fix"] else "")]


def test_v5_only_schema_names_every_v4_range(ckpts: dict[str, Path], tmp_path: Path) -> None:
    code, data, err = invoke(ckpts["llama"], "-m", "linear", "-f", "2", "--schema", "v5", "-o", tmp_path / "o", "--json")
    assert code == 0, err
    named = [w.split(":")[0] for w in data["warnings"] if w.startswith("transformers 4")]
    # consecutive ranges that differ the same way are one line: together they still cover every 4.x release
    spans = [n.removeprefix("transformers ").split(" to <") for n in named]
    assert spans[0][0] == "4.43" and spans[-1][1] == "5.0"
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    texts = [w.split(": ", 1)[1] for w in data["warnings"] if w.startswith("transformers 4")]
    assert len(named) < 6 and len(set(texts)) == len(named)


def test_null_rope_theta_is_refused(ckpts: dict[str, Path], tmp_path: Path) -> None:
    """transformers 5.23 saves "rope_theta": null after config.rope_scaling = {...}: never write the default."""
    src = tmp_path / "src"
    src.mkdir()
    cfg = json.loads((ckpts["llama"] / "config.json").read_text())
    cfg["rope_parameters"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": None}
    cfg.pop("rope_theta", None)
    (src / "config.json").write_text(json.dumps(cfg))
    code, _, err = invoke(src, "-m", "yarn", "-f", "4", "--replace-existing", "-o", tmp_path / "o")
    assert code != 0 and "rope_theta" in err and "null" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()
