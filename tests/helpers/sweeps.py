"""Running an evaluation command as a real process: paused mid-sweep, ended by SIGTERM, its resume line; and
a strict JSON parser for what the sweeps write."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def strict(text: str) -> Any:
    """Parse JSON as any standard parser would: NaN / Infinity are not JSON."""
    def refuse(constant: str) -> Any:
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def default_sigint() -> None:
    """Popen preexec_fn: Ctrl-C as a terminal delivers it. A job started in the background (`cmd &` in a script, as a
    CI runner may start the suite) inherits SIGINT ignored, and a Python started so never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def paused_run(args: list[str], log: Path, env: dict[str, str], after: int = 1) -> subprocess.Popen[str]:
    """``python -m ropectl *args``, stopped once ``after`` cells are logged (counted over every sweep it runs) until
    a signal arrives (no timing races); ``log`` is the file the paused sweep writes."""
    proc = subprocess.Popen([sys.executable, "-m", "ropectl", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**env, "ROPECTL_TEST_PAUSE_AFTER_CELLS": str(after)},
                            preexec_fn=default_sigint)
    while proc.poll() is None and not (log.is_file() and log.read_bytes().endswith(b"\n")):
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()  # paused mid-sweep, not finished or crashed
    return proc


def assert_busy(result: Any, pid: int) -> None:
    """A second run into the paused run's --out: exit 1 with one line naming the writer."""
    assert result.exit_code == 1, result.output
    assert f"another ropectl run (pid {pid}) is writing" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def terminate(proc: subprocess.Popen[str]) -> str:
    """SIGTERM, then its stderr."""
    proc.send_signal(signal.SIGTERM)
    return proc.communicate(timeout=120)[1]


def resume_argv(proc: subprocess.Popen[str], err: str, out: Path, command: str) -> list[str]:
    """A run ended by SIGTERM exits 143 with one 'terminated' line whose resume command names --out and --resume;
    returns that command's argv."""
    assert proc.returncode == 143, err
    lines = [ln for ln in err.splitlines() if ln.startswith("terminated")]
    assert len(lines) == 1 and "--resume" in lines[0] and str(out) in lines[0], err
    argv = shlex.split(lines[0].split("resume with: ", 1)[1])
    assert argv[:2] == ["ropectl", command] and "--resume" in argv
    return argv
