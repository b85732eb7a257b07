"""Ordinary bad inputs end in one line naming the problem and the fix: never 'unexpected ... report it'.

Each case is one row of the bad-input survey (its id in the test id), rebuilt here from scratch.
Validation gaps that used to print wrong values (theta 0 shown as 10,000, a trained context of -5,
Infinity in --json) are here too, and so are the bounds on what untrusted input may allocate.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from tests.helpers import checkpoints
from tests.helpers import eval_data as fx
from tests.helpers.cli import one_line

runner = CliRunner()
BASE = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 2048, "rope_theta": 10000.0}


def config_dir(tmp_path: Path, **changes: Any) -> Path:
    cfg = {**BASE, **changes}
    return checkpoints.write_config(tmp_path / "m", {k: v for k, v in cfg.items() if v is not None})


CONFIG_CASES = {
    "H-12 theta string in rope_parameters": ({"rope_parameters": {"rope_type": "default", "rope_theta": "abc"},
                                              "rope_theta": None}, "'rope_theta' is 'abc'"),
    "H-13 theta string top level": ({"rope_theta": "abc"}, "'rope_theta' is 'abc'"),
    "H-11 theta zero": ({"rope_theta": 0}, "'rope_theta' is 0"),
    "H-14 theta 1e308": ({"rope_theta": 1e308}, "'rope_theta' is 1e+308", "at most 1e+15"),
    "H-22 heads string": ({"num_attention_heads": "eight"}, "'num_attention_heads' is 'eight'"),
    "H-23 heads negative": ({"num_attention_heads": -8}, "'num_attention_heads' is -8"),
    "H-24 head_dim 1e12": ({"head_dim": 10**12}, "'head_dim'", "limit"),
    "H-25 max positions string": ({"max_position_embeddings": "big"}, "'max_position_embeddings' is 'big'"),
    "H-26 max positions negative": ({"max_position_embeddings": -5}, "'max_position_embeddings' is -5"),
    "H-18 factor 1e308": ({"rope_scaling": {"rope_type": "linear", "factor": 1e308}}, "factor 1e+308"),
    "H-59 head_dim 2": ({"head_dim": 2}, "rotary dimension is 2"),
    "kv heads bool": ({"num_key_value_heads": True}, "'num_key_value_heads' is True"),
}


@pytest.mark.parametrize("case", CONFIG_CASES, ids=list(CONFIG_CASES))
def test_config_values_are_checked(tmp_path: Path, case: str) -> None:
    changes, *needles = CONFIG_CASES[case]
    folder = config_dir(tmp_path, **changes)
    one_line(["inspect", str(folder)], *needles, code=1)
    one_line(["inspect", str(folder), "--json"], *needles, code=1)  # never a JSON body with a wrong value


def test_good_config_passes_the_same_checks(tmp_path: Path) -> None:
    """Negative control: the base config of the cases above is accepted, with the values it gives."""
    result = runner.invoke(app, ["inspect", str(config_dir(tmp_path)), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["rope_theta"], data["num_attention_heads"], data["head_dim"]) == (10000.0, 4, 16)
    assert data["max_position_embeddings"] == 2048


def test_h27_config_json_that_is_a_folder(tmp_path: Path) -> None:
    (tmp_path / "m" / "config.json").mkdir(parents=True)
    one_line(["inspect", str(tmp_path / "m")], "config.json' is a folder", code=1)
    (tmp_path / "e").mkdir()
    one_line(["inspect", str(tmp_path / "e")], "no config.json in", code=1)  # control: really absent


def test_json_nesting_bomb_in_config(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("[" * 200_000 + "]" * 200_000)
    one_line(["inspect", str(folder)], "nests too deeply", code=1)


def test_legal_but_suspicious_configs_warn(tmp_path: Path) -> None:
    """H-15 / H-08: a factor below 1 and a missing model_type are said, not passed over in silence."""
    half = config_dir(tmp_path / "a", rope_scaling={"rope_type": "linear", "factor": 0.5})
    data = json.loads(runner.invoke(app, ["inspect", str(half), "--json"]).stdout)
    assert any("below 1" in w for w in data["warnings"])
    untyped = config_dir(tmp_path / "b", model_type=None)
    data = json.loads(runner.invoke(app, ["inspect", str(untyped), "--json"]).stdout)
    assert any("no model_type" in w for w in data["warnings"])
    plain = json.loads(runner.invoke(app, ["inspect", str(config_dir(tmp_path / "c")), "--json"]).stdout)
    assert plain["warnings"] == []  # negative control
    text = " ".join(runner.invoke(app, ["inspect", str(untyped)]).stdout.split())
    assert "(folder, no model_type)" in text and "no model_type: assumed rotate_half" in text  # not "(folder, )"
    assert "HF 'unknown'" not in text


@pytest.mark.parametrize(("method", "factor"), [("linear", "1e308"), ("ntk", "1e300"), ("yarn", "inf")],
                         ids=["H-43", "H-44", "inf"])
def test_overflowing_factor_flags(tmp_path: Path, method: str, factor: str) -> None:
    folder = config_dir(tmp_path)
    one_line(["patch", str(folder), "-m", method, "-f", factor, "--dry-run"], "factor")
    ok = runner.invoke(app, ["patch", str(folder), "-m", method, "-f", "1000", "--dry-run"])
    assert ok.exit_code == 0, ok.output  # negative control: a large but sane factor still works


def test_patch_output_under_a_regular_file(tmp_path: Path) -> None:
    """H-77: -o a/sub where a is a file: ENOTDIR/EEXIST from the OS, mapped in the one CLI handler."""
    model = checkpoints.tiny_llama(tmp_path / "llama")
    (tmp_path / "afile").write_text("x")
    one_line(["patch", str(model), "-m", "yarn", "-f", "2", "-o", str(tmp_path / "afile" / "sub")], "afile")


def _safetensors(path: Path, header: bytes, data: bytes = b"") -> None:
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


def test_safetensors_header_nesting_bomb(tmp_path: Path) -> None:
    """H-121."""
    folder = checkpoints.write_config(tmp_path / "m", BASE)
    _safetensors(folder / "model.safetensors", b'{"x":' + b"[" * 200_000 + b"]" * 200_000 + b"}")
    one_line(["convert-layout", str(folder), "--to", "interleaved", "-o", str(tmp_path / "out")], "nests too deeply")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("verify", [[], ["--verify"]], ids=["H-85 written through", "X-04 KeyError"])
@pytest.mark.parametrize("tensor", ["model.layers.0.self_attn.q_proj.weight", "model.norm.weight"])
def test_unknown_safetensors_dtype_is_refused(tmp_path: Path, verify: list[str], tensor: str) -> None:
    from safetensors import safe_open

    model = checkpoints.tiny_llama(tmp_path / "llama")
    path = model / "model.safetensors"
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    with safe_open(path, "pt") as fh:  # the real reader agrees on the tensor we relabel
        assert tensor in fh.keys()
    header[tensor]["dtype"] = "F4X"
    _safetensors(path, json.dumps(header).encode(), raw[8 + n:])
    out = tmp_path / "out"
    one_line(["convert-layout", str(model), "--to", "interleaved", "-o", str(out), *verify], "'F4X'", tensor)
    assert not out.exists()


def test_os_error_of_a_copy_names_what_was_being_written() -> None:
    """DF-02: shutil's ENOSPC carries source and destination; the line says which one was being written."""
    import errno

    from ropectl.cli.errors import os_error

    two = str(os_error(OSError(errno.ENOSPC, "No space left on device", "/src/model.safetensors", None, "/out/m")))
    assert two.startswith("no space left on the device writing '/out/m' (from '/src/model.safetensors')"), two
    one = str(os_error(OSError(errno.EACCES, "Permission denied", "/out")))
    assert one.startswith("permission denied at '/out'"), one


def test_os_errors_are_one_line_with_the_errno_fix() -> None:
    """A real ENOSPC (writing /dev/full) through the one handler: the errno decides the fix."""
    from ropectl.cli.errors import handle_errors

    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")

    @handle_errors
    def write_full() -> None:
        with open("/dev/full", "wb") as fh:
            fh.write(b"x")

    import typer

    probe = typer.Typer()
    probe.command()(write_full)
    result = runner.invoke(probe, [])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: no space left on the device") and "Fix: free disk space" in result.stderr


# --- eval-ppl -----------------------------------------------------------------------------------------------

def test_e07_garbage_parquet(isolated, tiny_model, tmp_path: Path) -> None:
    bad = tmp_path / "ds.parquet"
    bad.write_bytes(b"PAR1" + bytes(range(256)) * 20)
    one_line(["eval-ppl", str(tiny_model), "-d", str(bad), "-l", "64", "-o", "out"], "cannot read", "ds.parquet")


@pytest.mark.parametrize("offline", ["1", ""], ids=["HF_HUB_OFFLINE", "hub unreachable"])
def test_e10_hub_dataset_fails_fast_offline(isolated, tiny_model, monkeypatch, offline: str) -> None:
    import time

    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", bool(offline))
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # discard port: refused at once
    start = time.monotonic()
    cause = "HF_HUB_OFFLINE is set" if offline else "cannot be reached"
    one_line(["eval-ppl", str(tiny_model), "-d", "pg19", "-l", "64", "-o", "out"], "unreachable dataset 'pg19'", cause)
    assert time.monotonic() - start < 30  # no minute of retries


def test_e22_method_without_factor_names_the_eval_spelling(isolated, tiny_model, tiny_corpus) -> None:
    line = one_line(["eval-ppl", str(tiny_model), "-d", str(tiny_corpus), "-l", "64", "-m", "yarn", "-o", "out"],
                    "-m yarn:4", code=2)
    assert "--factor F" not in line


def test_e30_model_without_tokenizer(isolated, tiny_corpus, tmp_path: Path) -> None:
    model = checkpoints.tiny_llama(tmp_path / "llama")
    one_line(["eval-ppl", str(model), "-d", str(tiny_corpus), "-l", "64", "-o", "out"], "tokenizer")


def test_e31_code_executing_pickle_is_refused_without_running(isolated, tiny_corpus, tmp_path: Path) -> None:
    model = fx.build("llama", tmp_path / "llama")
    (model / "model.safetensors").unlink()
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self) -> tuple[Any, ...]:
            return (Path.write_text, (marker, "ran"))

    import pickle

    (model / "pytorch_model.bin").write_bytes(pickle.dumps({"w": Evil()}))
    import warnings

    with warnings.catch_warnings(record=True) as said:  # a warning would print a second stderr line in a terminal
        warnings.simplefilter("always")
        # the same line as convert-layout's (ropectl.errors.pickle_refused), naming the file
        one_line(["eval-ppl", str(model), "-d", str(tiny_corpus), "-l", "64", "-o", "out"],
                 "'pytorch_model.bin' in", "a pickle that", "weights-only loading refused it and nothing was run")
    assert not [w for w in said if "pickle" in str(w.message)], [str(w.message) for w in said]
    assert not marker.exists()


@pytest.mark.parametrize(("line", "needles"), [
    ("[1, 2]", ("is a JSON list, not an object", '{"text": "..."}')),
    ("7", ("is a JSON int, not an object",)),
    ('{"body": "abc"}', ("no field 'text'", "--text-field", "['body']")),
], ids=["E-05 list line", "E-05 number line", "E-06 no text field"])
def test_jsonl_lines_that_are_not_records(isolated, tiny_model, tmp_path: Path, line: str, needles: tuple) -> None:
    path = tmp_path / "ds.jsonl"
    path.write_text(json.dumps({"text": "abc " * 40}) + "\n" + line + "\n")
    one_line(["eval-ppl", str(tiny_model), "-d", str(path), "-l", "16", "-o", "out"], *needles)


def test_e40_dataset_that_never_ends(isolated, tiny_model) -> None:
    one_line(["eval-ppl", str(tiny_model), "-d", "/dev/zero", "-l", "64", "-o", "out"], "not a regular file")


def test_dataset_reads_are_bounded(isolated, tiny_model, tmp_path: Path, monkeypatch) -> None:
    """Text files and JSONL lines above the limits are refused before they are read into memory."""
    import ropectl.runtime.corpus as data

    monkeypatch.setattr(data, "MAX_DATASET_BYTES", 1000)
    monkeypatch.setattr(data, "MAX_LINE_BYTES", 100)
    (tmp_path / "big.txt").write_text("a" * 1001)
    one_line(["eval-ppl", str(tiny_model), "-d", str(tmp_path / "big.txt"), "-l", "64", "-o", "o1"], "limit")
    (tmp_path / "long.jsonl").write_text(json.dumps({"text": "b" * 200}) + "\n")
    one_line(["eval-ppl", str(tiny_model), "-d", str(tmp_path / "long.jsonl"), "-l", "64", "-o", "o2"], "longer than")


def test_limits_sit_above_real_models() -> None:
    """The bounds only stop hostile values: the largest real values pass with a wide margin."""
    from ropectl import limits

    assert limits.MAX_HEAD_DIM >= 100 * 576  # DeepSeek-V3's 576-dim MLA heads
    assert limits.MAX_THETA >= 1e3 * 3.6e9  # Gradient's 1M-context Llama 3 base
    assert limits.MAX_POSITIONS >= 1e4 * 2**20 and math.isfinite(limits.MAX_FACTOR * limits.MAX_POSITIONS)


def test_seq_len_is_bounded(tmp_path: Path) -> None:
    folder = config_dir(tmp_path, rope_scaling={"rope_type": "dynamic", "factor": 4.0})
    one_line(["inspect", str(folder), "--seq-len", str(10**30)], "--seq-len", code=2)
    assert runner.invoke(app, ["inspect", str(folder), "--seq-len", "100000"]).exit_code == 0
