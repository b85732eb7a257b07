"""The publishers' long-context recipes, as their model cards print them, against what ropectl writes and prints.

The oracle is each card's own text, transcribed here by hand (not read from ropectl's card files), and transformers
(>= 4.56, which keeps an explicit yarn factor) building the card's block on the published config.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from tests.helpers.model_sweep import transformers_ropes

runner = CliRunner()
FIXTURES = Path(__file__).parents[1] / "fixtures" / "configs"
REL_TOL = 1e-6

# Transcribed from the cards' "Processing Long Texts" sections: the JSON block a user adds to config.json (where it
# goes), the length the card serves (vllm serve ... --max-model-len N), and llama-server's --rope-scale F
# --yarn-orig-ctx L where the card prints that line.
QWEN_BLOCK = {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}
CARDS = {
    # https://huggingface.co/Qwen/Qwen3-8B (Qwen3-30B-A3B publishes the same config shape, qwen3_moe)
    "qwen3-8b": {"block": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
                 "max_model_len": 131072, "rope_scale": "4", "yarn_orig_ctx": "32768", "native": 32768,
                 "preset": "qwen3-128k"},
    "qwen3-30b-a3b": {"block": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
                      "max_model_len": 131072, "rope_scale": "4", "yarn_orig_ctx": "32768", "native": 32768,
                      "preset": "qwen3-128k"},
    # https://huggingface.co/Qwen/QwQ-32B ("Full 131,072 tokens")
    "qwq-32b": {"block": QWEN_BLOCK, "max_model_len": 131072, "native": 32768, "preset": "qwq-128k"},
    # https://huggingface.co/Qwen/Qwen2.5-7B-Instruct ("Full 131,072 tokens")
    "qwen2.5-7b-instruct": {"block": QWEN_BLOCK, "max_model_len": 131072, "native": 32768,
                            "preset": "qwen2.5-128k"},
    # https://huggingface.co/Qwen/Qwen2.5-VL-7B-Instruct: the block is the rope_scaling section itself
    "qwen2.5-vl-7b-instruct": {"block": {"type": "yarn", "mrope_section": [16, 24, 24], "factor": 4,
                                         "original_max_position_embeddings": 32768},
                               "max_model_len": 131072, "native": 32768, "preset": "qwen2.5-vl-128k"},
}
# https://huggingface.co/Qwen/Qwen3-VL-8B-Instruct (the README's "expandable to 1M"): factor 3 from 262,144, served at
# 1,000,000; ropectl serves original x factor, 786,432 (docs/reference/model-cards.md says why).
QWEN3_VL = {"block": {"rope_type": "yarn", "mrope_section": [24, 20, 20], "mrope_interleaved": True, "factor": 3.0,
                      "original_max_position_embeddings": 262144}, "card_length": 1000000, "ours": 786432}


def _folder(tmp_path: Path, name: str, **changes: object) -> Path:
    folder = tmp_path / name
    folder.mkdir(parents=True)
    config = {**json.loads((FIXTURES / f"{name}.json").read_text()), **changes}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _card_folder(tmp_path: Path, name: str, block: dict, **changes: object) -> Path:
    """The published config with the card's block pasted in where the card says (text_config for Qwen3-VL)."""
    config = json.loads((FIXTURES / f"{name}.json").read_text())
    holder = config["text_config"] if "text_config" in config else config
    holder.update(rope_scaling=block, **changes)
    folder = tmp_path / "card" / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _section(config: dict) -> dict:
    holder = config.get("text_config", config)
    return {**holder, **holder["rope_scaling"]}


def _patch(*args: str) -> tuple[dict, str]:
    result = runner.invoke(app, ["patch", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


def _assert_same_rope(ours: Path, card: Path) -> None:
    theirs, mine = transformers_ropes(card), transformers_ropes(ours)
    assert set(theirs) == set(mine)
    for label, (inv, attention) in theirs.items():
        got_inv, got_attention = mine[label]
        assert max(abs(a - b) / abs(b) for a, b in zip(got_inv, inv)) <= REL_TOL, label
        assert got_attention == pytest.approx(attention, rel=REL_TOL), label


@pytest.mark.parametrize("how", [["-m", "yarn", "-f", "4"], ["-m", "yarn", "-t", "131072"], ["-m", "yarn", "-t", "128k"],
                                 ["-m", "yarn:4"], ["--preset"]])
@pytest.mark.parametrize("name", sorted(CARDS))
def test_patch_writes_the_cards_rope(tmp_path: Path, name: str, how: list[str]) -> None:
    card = CARDS[name]
    how = how + [card["preset"]] if how == ["--preset"] else how
    out = tmp_path / "out"
    data, err = _patch(str(_folder(tmp_path, name)), *how, "-o", str(out))
    written = json.loads((out / "config.json").read_text())
    section = _section(written)
    assert section["max_position_embeddings"] == card["max_model_len"]
    assert section["factor"] == card["block"]["factor"]
    assert section["original_max_position_embeddings"] == card["block"]["original_max_position_embeddings"]
    _assert_same_rope(out, _card_folder(tmp_path, name, card["block"]))
    assert data["trained_context"] == card["native"] and data["target_context"] == card["max_model_len"]
    assert "differs from the model's trained context" not in err


def test_qwen3_vl_takes_the_cards_factor_and_serves_original_times_factor(tmp_path: Path) -> None:
    out = tmp_path / "out"
    data, _ = _patch(str(_folder(tmp_path, "qwen3-vl-8b-instruct")), "--preset", "qwen3-vl-768k", "-o", str(out))
    section = _section(json.loads((out / "config.json").read_text()))
    assert section["factor"] == 3.0 and section["original_max_position_embeddings"] == 262144
    assert section["mrope_section"] == [24, 20, 20] and section["mrope_interleaved"] is True
    assert section["max_position_embeddings"] == QWEN3_VL["ours"] == 262144 * 3 and data["target_context"] == 786432
    _assert_same_rope(out, _card_folder(tmp_path, "qwen3-vl-8b-instruct", QWEN3_VL["block"],
                                        max_position_embeddings=QWEN3_VL["card_length"]))


def test_the_cards_own_original_length_passes_without_a_warning(tmp_path: Path) -> None:
    _, err = _patch(str(_folder(tmp_path, "qwen3-8b")), "-m", "yarn", "-f", "4", "--set",
                    "original_max_position_embeddings=32768", "--dry-run")
    assert "differs from the model's trained context" not in err


def test_an_explicit_original_length_wins_over_the_card(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _patch(str(_folder(tmp_path, "qwen3-8b")), "-m", "yarn", "-f", "4", "--set",
           "original_max_position_embeddings=40960", "-o", str(out))
    written = json.loads((out / "config.json").read_text())
    assert written["max_position_embeddings"] == 163840
    assert written["rope_scaling"].get("original_max_position_embeddings", written.get(
        "original_max_position_embeddings")) == 40960


def test_emit_lines_hold_the_cards_values(tmp_path: Path) -> None:
    name, card = "qwen3-8b", CARDS["qwen3-8b"]
    folder = str(_folder(tmp_path, name))
    vllm = runner.invoke(app, ["patch", folder, "-m", "yarn", "-f", "4", "--emit", "vllm"])
    assert vllm.exit_code == 0, vllm.output
    argv = shlex.split(vllm.stdout.strip())
    assert len(vllm.stdout.strip().splitlines()) == 1  # stdout stays one pasteable line; the card's note is stderr
    assert argv[argv.index("--max-model-len") + 1] == str(card["max_model_len"])
    section = json.loads(argv[argv.index("--hf-overrides") + 1])["rope_parameters"]
    assert section["factor"] == card["block"]["factor"]
    assert section["original_max_position_embeddings"] == card["block"]["original_max_position_embeddings"]
    llama = runner.invoke(app, ["patch", folder, "-m", "yarn", "-t", "128k", "--emit", "llama.cpp"])
    argv = shlex.split(llama.stdout.strip())
    assert argv[argv.index("--rope-scaling") + 1] == "yarn"
    assert argv[argv.index("--rope-scale") + 1] == card["rope_scale"]
    assert argv[argv.index("--yarn-orig-ctx") + 1] == card["yarn_orig_ctx"]
    assert argv[argv.index("-c") + 1] == str(card["max_model_len"])
    assert "static YaRN" in vllm.stderr and "ropectl eval-ppl" in vllm.stderr


def test_inspect_names_the_native_context_and_its_source(tmp_path: Path) -> None:
    result = runner.invoke(app, ["inspect", str(_folder(tmp_path, "qwen3-8b")), "--json"])
    data = json.loads(result.stdout)
    assert data["trained_context"] == 32768 and data["max_position_embeddings"] == 40960
    assert "model card" in data["trained_context_source"] and "40,960" in data["trained_context_source"]
    assert data["model_card"]["source"] == "https://huggingface.co/Qwen/Qwen3-8B"


def test_another_qwen3_config_keeps_its_own_lengths(tmp_path: Path) -> None:
    """Negative control: the 2507 releases (native 262,144, theta 5e6 or 1e7) are qwen3 too, but not this card's."""
    folder = _folder(tmp_path, "qwen3-8b", max_position_embeddings=262144, rope_theta=5000000)
    data = json.loads(runner.invoke(app, ["inspect", str(folder), "--json"]).stdout)
    assert data["trained_context"] == 262144 and data["model_card"] is None and data["notes"] == []
    out = tmp_path / "out"
    _patch(str(folder), "-m", "yarn", "-f", "2", "-o", str(out))
    assert json.loads((out / "config.json").read_text())["max_position_embeddings"] == 524288


def test_a_partial_match_keeps_its_own_lengths_and_says_so(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "qwen3-8b", rope_theta=10000000)  # the card's model type and length, not its base
    data = json.loads(runner.invoke(app, ["inspect", str(folder), "--json"]).stdout)
    assert data["trained_context"] == 40960 and data["model_card"] is None
    assert any("resembles the Qwen3 card" in n and "rope_theta" in n for n in data["notes"])
    out = tmp_path / "out"
    data, _ = _patch(str(folder), "-m", "yarn", "-f", "2", "-o", str(out))
    assert json.loads((out / "config.json").read_text())["max_position_embeddings"] == 81920
    assert any("resembles the Qwen3 card" in n for n in data["notes"]) and data["card"] is None


def test_a_card_the_user_adds_is_read_the_same_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / "mine.toml").write_text(
        'name = "mine"\ntitle = "My model"\nsource = "https://example.org/card"\n'
        '[match]\nmodel_type = "qwen2"\nmax_position_embeddings = 32768\nhidden_size = 3584\n'
        '[native]\ncontext = 16384\nnote = "the last 16k are for generation"\n'
        '[[recipe]]\npreset = "mine-64k"\nmethod = "yarn"\nfactor = 4.0\noriginal = 16384\nserve_length = 65536\n'
        'block = { rope_type = "yarn", factor = 4.0, original_max_position_embeddings = 16384 }\n')
    monkeypatch.setenv("ROPECTL_CARDS_DIR", str(cards))
    folder = _folder(tmp_path, "qwen2.5-7b-instruct")
    data = json.loads(runner.invoke(app, ["inspect", str(folder), "--json"]).stdout)
    assert data["trained_context"] == 16384 and data["model_card"]["name"] == "mine"
    patched, _ = _patch(str(folder), "--preset", "mine-64k", "--dry-run")
    assert patched["target_context"] == 65536


def test_a_malformed_user_card_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.helpers.cli import one_line

    (tmp_path / "bad.toml").write_text('name = "bad"\ntitle = "x"\nsource = "y"\n[match]\nmax_position_embeddings = 1\n')
    monkeypatch.setenv("ROPECTL_CARDS_DIR", str(tmp_path))
    one_line(["inspect", str(_folder(tmp_path, "qwen3-8b"))], "bad.toml", "docs/reference/model-cards.md")


def test_two_matching_cards_keep_the_configs_lengths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cards = tmp_path / "cards"
    cards.mkdir()
    for name in ("one", "two"):
        (cards / f"{name}.toml").write_text(f'name = "{name}"\ntitle = "{name}"\nsource = "s"\n[match]\n'
                                            'model_type = "qwen3"\nmax_position_embeddings = 40960\n'
                                            '[native]\ncontext = 1024\n')
    monkeypatch.setenv("ROPECTL_CARDS_DIR", str(cards))
    data = json.loads(runner.invoke(app, ["inspect", str(_folder(tmp_path, "qwen3-8b")), "--json"]).stdout)
    assert data["trained_context"] == 40960 and data["model_card"] is None
    assert any("several model cards (one, two)" in n for n in data["notes"])


@pytest.mark.slow
def test_the_printed_measure_command_runs_and_counts_from_the_native_context(
        tmp_path: Path, isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiny Qwen3 with the card's config shape: patch names the eval-ppl run that measures the caveat; that line
    runs as printed (embedded corpus), and eval-ppl counts the trained context from the card (32,768), not 40,960."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from tests.helpers.checkpoints import VOCAB, save_model
    from tests.helpers.eval_data import add_char_tokenizer

    model = tmp_path / "qwen3-tiny"
    config = Qwen3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=40960,
                         rope_theta=1e6)
    add_char_tokenizer(save_model(Qwen3ForCausalLM, config, model, seed=7))
    result = runner.invoke(app, ["patch", str(model), "-m", "yarn", "-f", "4", "--emit", "vllm"])
    line = next(n for n in result.stderr.splitlines() if "measure it on this model:" in n).split(
        "measure it on this model: ")[1]
    argv = shlex.split(line)
    assert argv[:2] == ["ropectl", "eval-ppl"] and argv[2] == str(model)
    run = runner.invoke(app, [*argv[1:], "--json"])
    assert run.exit_code == 0, run.output
    data = json.loads(run.stdout)
    assert data["meta"]["trained_context"] == 32768


def test_the_docs_table_lists_every_card_and_preset() -> None:
    """docs/reference/model-cards.md is derived from the card files: a card or preset added without its row fails here."""
    tomllib = pytest.importorskip("tomllib")
    doc = (Path(__file__).parents[2] / "docs" / "reference" / "model-cards.md").read_text()
    for path in (Path(__file__).parents[2] / "ropectl" / "families" / "cards").glob("*.toml"):
        data = tomllib.loads(path.read_text())
        assert f"| `{data['name']}` [" in doc, path.name
        for recipe in data.get("recipe", []):
            assert f"`{recipe['preset']}`" in doc, recipe["preset"]


def test_a_gguf_is_recognised_from_its_metadata(tmp_path: Path) -> None:
    import gguf

    from tests.helpers.checkpoints import tiny_gguf

    # the card's config shape as llama.cpp's qwen3 keys
    source = tiny_gguf(tmp_path / "qwen3.gguf", "qwen3", context=40960, embedding=4096, heads=32, kv_heads=8,
                       theta=1e6, head_dim=128)
    data = json.loads(runner.invoke(app, ["inspect", str(source), "--json"]).stdout)
    assert data["trained_context"] == 32768 and data["model_card"]["name"] == "qwen3"
    out = tmp_path / "qwen3-128k.gguf"
    _patch(str(source), "-m", "yarn", "-f", "4", "-o", str(out))
    fields = gguf.GGUFReader(str(out)).fields
    value = lambda key: fields[key].parts[fields[key].data[0]][0]  # noqa: E731
    assert value("qwen3.rope.scaling.original_context_length") == 32768
    assert value("qwen3.rope.scaling.factor") == 4.0
    assert value("qwen3.context_length") == 131072
