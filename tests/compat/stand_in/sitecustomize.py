"""An import-only stand-in for torchvision in the vLLM venv (see vllm_rope_runner.py): installed at interpreter start
through PYTHONPATH, so every process vLLM starts has it. A real, loadable torchvision is used when there is one."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types


class _Any:
    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, item: str) -> _Any:
        return _Any(f"{self._name}.{item}")

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError(f"torchvision stand-in: {self._name} was called")

    def __getitem__(self, item: object) -> _Any:
        return self

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)

    def __or__(self, other: object) -> type:
        return object

    __ror__ = __or__


class _StandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):  # noqa: ANN001, ANN201
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):  # noqa: ANN001, ANN201
        module = types.ModuleType(spec.name)
        module.__path__, module.__version__ = [], "0.0.0"
        module.__getattr__ = lambda item: _Any(f"{spec.name}.{item}") if not item.startswith("__") else None
        return module

    def exec_module(self, module) -> None:  # noqa: ANN001
        pass


if importlib.util.find_spec("torchvision") is None:
    sys.meta_path.insert(0, _StandIn())


