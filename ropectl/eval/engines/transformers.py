"""The transformers engine: weights loaded once with from_pretrained, a method switch rebuilds only the rotary
embedding module(s) and checks their frequencies (``ropectl.eval.model``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ropectl.errors import CheckpointError, pickle_refused
from ropectl.eval.engines import register_engine
from ropectl.eval.model import LoadedModel, MethodState, ModelSource, load_model, load_tokenizer
from ropectl.eval.rotary import activate, verify_after_forward


@register_engine("transformers")
class TransformersEngine:
    name = "transformers"

    def __init__(self, source: ModelSource, device: str, dtype: str, device_map: str | None = None,
                 command: str = "eval-ppl") -> None:
        self.source, self.device, self.dtype, self.device_map, self.command = source, device, dtype, device_map, command
        self.tokenizer: Any = None
        self.loaded: LoadedModel | None = None

    @property
    def model(self) -> Any:
        return None if self.loaded is None else self.loaded.model

    @property
    def active(self) -> str | None:
        return None if self.loaded is None else self.loaded.active

    def load_tokenizer(self) -> Any:
        path, kwargs = self.source.path, self.source.kwargs
        try:
            self.tokenizer = load_tokenizer(path, kwargs)
        except (OSError, ValueError, TypeError, KeyError) as exc:  # transformers' "no tokenizer here" varies
            raise CheckpointError(f"cannot load a tokenizer from '{path}' ({type(exc).__name__})",
                                  f"{self.command} needs the model's tokenizer files (tokenizer.json or "
                                  "tokenizer.model) beside config.json; copy them from the base model") from None
        return self.tokenizer

    def load(self) -> None:
        import pickle
        import warnings

        path, kwargs = self.source.path, self.source.kwargs
        try:
            with warnings.catch_warnings():  # torch's note on a raw pickle's protocol would precede the refusal
                warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
                self.loaded = load_model(path, kwargs, self.tokenizer, self.device, self.dtype, self.device_map)
        except pickle.UnpicklingError as exc:
            raise pickle_refused(weights_subject(path), exc) from None

    def activate(self, state: MethodState) -> None:
        assert self.loaded is not None
        if self.loaded.active != state.label or state.length_dependent:
            activate(self.loaded, state)  # fresh module: dynamic's growth-only cache must not leak across lengths

    def verify_after_forward(self, state: MethodState, length: int) -> None:
        assert self.loaded is not None
        verify_after_forward(self.loaded, state, length)

    def input_device(self) -> Any:
        assert self.loaded is not None
        return self.loaded.input_device()

    def versions(self) -> dict[str, str]:
        import torch
        import transformers

        return {"torch": torch.__version__, "transformers": transformers.__version__}


def weights_subject(path: str) -> str:
    """The pickle's own name where the folder has one .bin file (transformers does not say which it loaded)."""
    folder = Path(path)
    bins = sorted(folder.glob("*.bin")) if folder.is_dir() else []
    return f"'{bins[0].name}' in '{path}'" if len(bins) == 1 else f"the weights in '{path}'"
