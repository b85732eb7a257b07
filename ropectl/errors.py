"""One error hierarchy for ropectl.

Every error carries the problem and the fix, so the CLI can print a single line and core callers get
the same message. ``exit_code`` is 2 for usage errors (bad flags or values) and 1 for everything else.
"""

from __future__ import annotations


class RopectlError(Exception):
    """Base class: ``problem`` says what failed, ``fix`` says what to do about it."""

    exit_code = 1

    def __init__(self, problem: str, fix: str | None = None) -> None:
        self.problem = problem.rstrip(". ")
        self.fix = fix.rstrip(". ") if fix else None
        super().__init__(str(self))

    def __str__(self) -> str:
        text = self.problem if not self.fix else f"{self.problem}. Fix: {self.fix}"
        # One line on the terminal, whatever the parts contained.
        return " ".join(text.split()) + "."


class UsageError(RopectlError):
    """Bad flags or option values."""

    exit_code = 2


class MethodError(UsageError):
    """An unknown scaling method or a bad method parameter."""


class ModelNotFoundError(RopectlError):
    """MODEL is neither a folder, a GGUF file nor a reachable hub id."""


class ConfigError(RopectlError):
    """config.json is missing, unreadable or contradicts itself."""


class NoRopeError(RopectlError):
    """The model does not use rotary position embeddings."""


class GGUFError(RopectlError):
    """A GGUF file is truncated, unreadable, or of an unsupported architecture."""


class CheckpointError(RopectlError):
    """Weights are missing, corrupt, or disagree with the config."""


def pickle_refused(subject: str, exc: BaseException) -> CheckpointError:
    """The one refusal for a pickle that weights-only loading stopped (convert-layout, eval-ppl alike).

    torch's own text advises weights_only=False, which would run the pickle: name only what it would call.
    """
    import re

    found = re.search(r"(?:Unsupported global: |unsupported )GLOBAL (\S+)", str(exc))
    what = f"would call {found.group(1).rstrip('.,')} when loaded" if found else "holds more than plain tensors"
    return CheckpointError(f"{subject}: a pickle that {what}; weights-only loading refused it and nothing was run",
                           "use a safetensors copy of the weights, or re-save it as a plain state dict of tensors")


class LayoutError(RopectlError):
    """A q/k layout conversion cannot be done as asked."""


class OutputError(RopectlError):
    """The output location cannot be written, or would lose data."""


class DataError(RopectlError):
    """An evaluation corpus is missing, unknown or too short."""


class DeviceError(RopectlError):
    """The requested device is not available."""


class EngineError(RopectlError):
    """An evaluation engine (vLLM) is not installed, does not import here, or cannot start."""


class VerificationError(RopectlError):
    """A written result does not match what ropectl computed."""
