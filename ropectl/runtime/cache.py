"""ropectl's own cache folder (token caches, the CPU dtype verdict), shared by every evaluation task."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root(cache_dir: Path | None = None) -> Path:
    """``cache_dir`` when given, else $XDG_CACHE_HOME/ropectl (~/.cache/ropectl)."""
    if cache_dir is not None:
        return Path(cache_dir)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ropectl"
