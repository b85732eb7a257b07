"""Named TOML presets in ``configs/``, shared by ``patch`` (``patch-NAME.toml``) and ``eval-ppl`` (``eval-NAME.toml``).

``ROPECTL_CONFIG_DIR`` points elsewhere, for presets kept outside a clone of this repository.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from ropectl.errors import UsageError


def presets_dir() -> Path:
    return Path(os.environ.get("ROPECTL_CONFIG_DIR") or Path(__file__).resolve().parents[1] / "configs")


def list_presets(prefix: str) -> list[str]:
    folder = presets_dir()
    return sorted(p.stem[len(prefix):] for p in folder.glob(f"{prefix}*.toml")) if folder.is_dir() else []


def preset_path(name: str, prefix: str) -> Path:
    """Where preset NAME lives (``NAME``, ``PREFIX-NAME`` and ``NAME.toml`` all name the same file)."""
    return presets_dir() / f"{prefix}{name.removeprefix(prefix).removesuffix('.toml')}.toml"


def load_toml_table(path: Path, table: str, what: str = "config file") -> dict[str, Any]:
    """The ``[table]`` of a TOML file, or the whole file when it has no such table."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read {what} '{path}' ({exc.strerror})", "check the path") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{what} '{path}' is not valid TOML ({exc})", "fix the TOML syntax") from None
    section = data.get(table, data)
    if not isinstance(section, dict):
        raise UsageError(f"'[{table}]' in '{path}' is not a table", f"write [{table}] followed by key = value lines")
    return section
