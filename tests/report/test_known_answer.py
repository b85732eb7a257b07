"""Known-answer cases on the real SmolLM2-135M (issue 37's proof), built as tests/search/test_known_optimum.py builds
its planted model: SmolLM2 (trained at 8k, theta 100000) rewritten to claim a 2k context with theta / 3^(64/62).

- restored: ``patch -m ntk -f 3`` gives back the true theta (NTK multiplies theta by 3^(d/(d-2))), so against the
  planted base at 4k and 6k it is reached, and its in-window PPL is no worse than the planted base's (retained);
- broken: ``patch -m linear -f 16`` squeezes every position 16-fold: not reached, naming the criterion;
- undecidable: the restored model with 2 samples per length: not determined (22 would be the least to count).

Sizes: one task (niah_single_1, which SmolLM2 does in window), 22 samples per length for the restored model (the
fewest at which a perfect score counts), 6 retention documents; the base is measured at the reference length only.
Each case has passed on the 2-core AVX2 machine, one process at 2 threads: minutes in docs/how-to/report.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ropectl.cli.app import app
from tests.helpers.cli import runner

S_STAR, TRAINED, HEAD_DIM, THETA = 3.0, 2048, 64, 100000.0
RUN = ["-t", "6k", "--lengths", "4k,6k", "-T", "niah_single_1", "--docs", "6", "--json"]


@pytest.fixture(scope="module")
def planted(smollm2: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from ropectl.patch.gguf import rewrite_gguf

    root = tmp_path_factory.mktemp("known-answer")
    base = root / "planted.gguf"
    theta = THETA / S_STAR ** (HEAD_DIM / (HEAD_DIM - 2))
    rewrite_gguf(smollm2, base, "llama", {"llama.rope.freq_base": theta, "llama.context_length": TRAINED}, set())
    out = {"base": base, "root": root}
    for name, method, factor in (("restored", "ntk", "3"), ("broken", "linear", "16")):
        result = runner.invoke(app, ["patch", str(base), "-m", method, "-f", factor, "-o", str(root / f"{name}.gguf")])
        assert result.exit_code == 0, result.output
        out[name] = root / f"{name}.gguf"
    return out


def report(planted: dict[str, Path], name: str, samples: str) -> dict:
    out = planted["root"] / f"card-{name}-{samples}"
    result = runner.invoke(app, ["report", str(planted["base"]), str(planted[name]), *RUN, "-n", samples, "-o",
                                 str(out)])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.known_answer
def test_restored_theta_is_reached_and_retained(planted: dict[str, Path]) -> None:
    card = report(planted, "restored", "22")
    assert card["tasks"]["kept"] == ["niah_single_1"]
    assert card["verdict"]["status"] == "reached", card["verdict"]
    assert card["retention"]["retained"] is True


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.known_answer
def test_linear_16_is_not_reached(planted: dict[str, Path]) -> None:
    card = report(planted, "broken", "10")
    assert card["verdict"]["status"] == "not reached", card["verdict"]
    assert card["verdict"]["failed"], card["verdict"]  # the criterion is named
    assert card["verdict"]["failed"][0] in card["verdict"]["line"]


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.known_answer
def test_two_samples_are_not_determined(planted: dict[str, Path]) -> None:
    card = report(planted, "restored", "2")
    assert card["verdict"]["status"] == "not determined", card["verdict"]
    assert card["verdict"]["samples_to_decide"] is not None
