"""The serving engines are derived from the reader modules: `recommend --serve-with`, its defaults, `patch --emit` and
recommend's ship lines come from each module's SERVE_AS / SERVED_BY_DEFAULT / SERVES_GGUF / cannot_serve /
emit_line, so a reader added with those reaches every one of them."""

from __future__ import annotations

import types

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from ropectl.patch.spec import emits
from ropectl.readers import emitters, serving_engines, serving_engines_for, serving_readers, why_not_served
from ropectl.recommend import patch_commands

runner = CliRunner()


def test_the_serving_engines_as_users_name_them() -> None:
    # written apart from the code: the four engines a checkpoint is served with, in the readers' order
    assert serving_engines() == ("transformers", "vllm", "sglang", "llama.cpp")
    assert emitters() == ("vllm", "sglang", "llama.cpp") and emits() == ("config", "vllm", "sglang", "llama.cpp")
    assert serving_engines_for("m.gguf") == ("llama.cpp",)
    assert serving_engines_for("./folder") == ("transformers", "vllm", "llama.cpp")  # SGLang only when asked


def test_help_names_every_emitter_and_serving_engine() -> None:
    """The help strings are written out (deriving them would import every reader at start-up): checked here."""
    text = " ".join(runner.invoke(app, ["patch", "--help"], env={"COLUMNS": "200"}).stdout.split())
    for engine in emitters():
        assert engine in text.split("--emit TEXT", 1)[1].split(" --", 1)[0], engine
        assert engine in text.split("--dry-run", 1)[1].split(" --emit TEXT", 1)[0], engine
    text = " ".join(runner.invoke(app, ["recommend", "--help"], env={"COLUMNS": "200"}).stdout.split())
    for engine in serving_engines():
        assert engine in text.split("--serve-with", 1)[1].split(" --", 1)[0], engine


def test_a_new_serving_reader_reaches_every_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in module with the serving attributes joins serve-with, why_not_served, --emit and the ship lines;
    without emit_line it serves but prints no line (the negative control)."""
    import ropectl.readers as readers

    toy = types.ModuleType("toy_reader")
    toy.ENGINE, toy.SERVE_AS, toy.SERVED_BY_DEFAULT = "Toy", "toy", True
    toy.cannot_serve = lambda rope_type: "Toy has no dynamic" if rope_type == "dynamic" else None
    real = serving_readers()
    monkeypatch.setattr(readers, "serving_readers", lambda: {**real, "toy": toy})
    assert "toy" in readers.serving_engines() and "toy" in readers.serving_engines_for("./folder")
    assert "toy" not in readers.emitters()
    assert readers.why_not_served("dynamic", ("toy",)) == "Toy has no dynamic"
    toy.emit_line = lambda view: ({"command": f"toy-serve {view.where}"}, [])
    assert readers.emitters()[-1] == "toy"
    lines = patch_commands("./m", "dynamic:2", ("toy",))
    assert lines[-1] == "# not for toy: Toy has no dynamic"
    assert patch_commands("./m", "yarn:2", ("toy",))[-1] == "ropectl patch ./m -m yarn:2 --emit toy"


def test_why_not_served_names_each_engine_that_cannot() -> None:
    assert why_not_served("yarn", serving_engines()) is None
    assert why_not_served("dynamic", ("transformers",)) is None
    assert "vLLM" in (why_not_served("dynamic", ("vllm",)) or "")
    assert "llama.cpp" in (why_not_served("dynamic", ("llama.cpp",)) or "")
