"""One flag name, one kind and one meaning in every command: walked from the CLI itself (click's parameters)."""

from __future__ import annotations

from collections import defaultdict

import click
import pytest

# Names that still have two kinds, each with what it means where (none now; nothing may join this list).
PENDING: dict[str, str] = {}


def _commands() -> dict[str, click.Command]:
    from typer.main import get_command

    from ropectl.cli.app import app

    group = get_command(app)
    ctx = click.Context(group)
    return {name: group.get_command(ctx, name) for name in group.list_commands(ctx)}


def kinds(commands: dict[str, click.Command]) -> dict[str, dict[str, set[str]]]:
    """option name -> kind (flag, integer, float, text, path ...) -> the commands that give it that kind."""
    out: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for name, command in commands.items():
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                kind = "flag" if param.is_flag else param.type.name
                for spelling in (*param.opts, *param.secondary_opts):
                    out[spelling][kind].add(name)
    return out


def conflicts(commands: dict[str, click.Command]) -> dict[str, dict[str, set[str]]]:
    return {name: dict(by) for name, by in kinds(commands).items() if len(by) > 1}


def test_no_flag_name_has_two_kinds() -> None:
    found = conflicts(_commands())
    assert set(found) == set(PENDING), {n: {k: sorted(c) for k, c in by.items()} for n, by in found.items()}


def test_the_walk_sees_two_kinds() -> None:
    """Negative control: two commands that give one name two kinds are a conflict."""
    a = click.Command("a", params=[click.Option(["--budget"], type=float)])
    b = click.Command("b", params=[click.Option(["--budget"], type=int)])
    assert set(conflicts({"a": a, "b": b})) == {"--budget"}
    assert not conflicts({"a": a, "c": click.Command("c", params=[click.Option(["--budget"], type=float)])})


@pytest.mark.parametrize(("name", "words"), [
    ("--budget", "minutes"),  # recommend's and search's time budget; search's trial count is --trials
    ("--dataset", "documents|corpus|plays|dataset"),
    ("--samples", "trials"),  # trials per cell in eval-tasks and eval-passkey, needle trials in search
    ("-n", "documents|trials"),  # each eval cell's sample size: documents for PPL, trials for tasks
    ("--max-regression", "over the unpatched model"),  # recommend's and search's in-window rule: against none
])
def test_one_meaning(name: str, words: str) -> None:
    """Every command that takes the name says the same thing about it, and no command spells it otherwise."""
    import re

    seen = {cmd: p for cmd, c in _commands().items() for p in c.params
            if isinstance(p, click.Option) and name in p.opts and not p.hidden}
    if name == "-n":  # the short name is the cell's sample size, spelled out by its long name
        assert {p.opts[0] for p in seen.values()} <= {"--docs", "--samples"}, seen
    assert len(seen) >= 2, seen
    for cmd, param in seen.items():
        assert re.search(words, param.help or "", re.I), (cmd, param.help)


@pytest.mark.parametrize(("args", "new"), [
    (["search", "-t", "1k", "--time", "5"], "--budget"),
    (["finetune", "MODEL", "--data", "corpus/"], "--dataset"),
    (["eval-passkey", "--trials", "2"], "--samples"),  # --trials is search's count of Optuna trials
])
def test_old_spellings_name_the_new_one(args: list[str], new: str) -> None:
    from tests.helpers.cli import one_line

    one_line(args, f"is now {new}")


def undeclared(commands: dict[str, click.Command], declared: dict[str, str]) -> list[str]:
    """Names two commands take whose help is neither one declaration (the same text everywhere) nor the
    declared meaning (``declared``: name -> the words its help starts with) followed by a command's detail."""
    helps: dict[str, dict[str, str]] = defaultdict(dict)
    for cmd, command in commands.items():
        for p in command.params:
            if isinstance(p, click.Option) and not p.hidden:
                helps[p.opts[0]][cmd] = p.help or ""
    out = []
    for name, by in helps.items():
        if len(by) < 2 or len(set(by.values())) == 1:
            continue
        stem = declared.get(name)
        odd = sorted(cmd for cmd, text in by.items() if stem is None or not text.startswith(stem))
        if odd:
            out.append(f"{name}: {', '.join(odd)}")
    return out


# Names two commands share with meanings of their own: each says what it is where (checked by hand, not declared).
OWN = {"--method": "patch and finetune take one spec; the evaluation commands repeat it",
       "--lengths": "report's judged lengths default to the trained context up to the target",
       "--task": "report's candidate tasks, filtered by the base's reference score",
       "--out": "results folder of each command",
       "--output": "the checkpoint patch, convert-layout and finetune write",
       "--replace-existing": "patch replaces the scaling; evaluation scales from it"}


def test_every_shared_name_is_declared_once() -> None:
    from ropectl.cli.flags import SHARED

    declared = {name: meaning for name, (_, meaning) in SHARED.items()}
    declared["--max-regression"] = "Largest PPL increase over the unpatched model"
    found = undeclared(_commands(), declared)
    assert [f for f in found if f.split(":")[0] not in OWN] == []


def test_the_declaration_check_sees_a_second_meaning() -> None:
    """Negative control: a shared name whose help does not start with its declared meaning is reported."""
    a = click.Command("a", params=[click.Option(["--seed"], help="Seed of the random draws: the keys.")])
    b = click.Command("b", params=[click.Option(["--seed"], help="The sampler's seed.")])
    assert undeclared({"a": a, "b": b}, {"--seed": "Seed of the random draws"}) == ["--seed: b"]
    assert undeclared({"a": a, "c": a}, {}) == []  # one declaration, the same text: nothing to report
