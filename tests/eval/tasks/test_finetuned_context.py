"""A ropectl fine-tune's checkpoint is trained at its target, as its record states: eval-tasks must not call that
length 'beyond the trained context' (it said so from the pretraining context of the base)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ropectl.cli.app import app
from tests.helpers.cli import runner
from tests.helpers.eval_data import build
from tests.helpers.finetuned import patched_config


def _finetuned(folder: Path, record: dict[str, object] | None) -> Path:
    """The tiny Llama (pretrained at 256) under yarn:2 as patch writes it, with a fine-tune record (or none)."""
    build("llama", folder)
    config = patched_config(folder, "yarn:2")
    if record is not None:
        config["ropectl"]["finetune"] = record
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(("record", "trained"), [
    ({"base_model": "tiny", "method": "yarn:2", "mode": "full", "window": 512, "target": 512, "trained": 256}, 512),
    (None, 256),  # the control: the same patched model, not fine-tuned, is trained at 256 only
])
def test_eval_tasks_reads_the_trained_length_the_record_states(tmp_path: Path, isolated: Path,
                                                               record: dict[str, object] | None, trained: int) -> None:
    model = _finetuned(tmp_path / "model", record)
    result = runner.invoke(app, [
        "eval-tasks", str(model), "--task", "passkey", "-l", "512", "-n", "1", "--dtype", "fp32", "-o", "out"])
    assert result.exit_code == 0, result.output
    assert json.loads((isolated / "out" / "tasks.json").read_text())["meta"]["trained_context"] == trained
    assert ("beyond the trained context" in result.stdout) is (trained < 512), result.stdout
