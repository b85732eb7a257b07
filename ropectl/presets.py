"""Named TOML presets in ``configs/``, shared by ``patch`` (``patch-NAME.toml``) and ``eval-ppl`` (``eval-NAME.toml``).

The repository's top-level ``configs/`` folder is installed as the package ``ropectl.configs`` (pyproject.toml maps
it), so the presets are found through importlib.resources in a wheel install and an editable one alike; a bare
checkout on ``sys.path`` (no install) reads ``configs/`` beside the package. ``ROPECTL_CONFIG_DIR`` points
elsewhere, for presets of your own.
"""

from __future__ import annotations

import os
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from ropectl.errors import UsageError


def presets_dir() -> Path:
    override = os.environ.get("ROPECTL_CONFIG_DIR")
    if override:
        return Path(override)
    try:
        shipped = resources.files("ropectl.configs")
    except ModuleNotFoundError:  # a checkout on sys.path, not installed: configs/ is beside the package
        return Path(__file__).resolve().parents[1] / "configs"
    return Path(str(shipped))


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
