"""``ropectl eval-passkey``: passkey retrieval over lengths x depths x RoPE methods, scored by teacher forcing."""

from ropectl.eval.tasks.passkey.runner import PasskeyResult, run_passkey
from ropectl.eval.tasks.passkey.spec import PASSKEY_DEFAULTS, PasskeySpec, build_passkey_spec

__all__ = ["PASSKEY_DEFAULTS", "PasskeyResult", "PasskeySpec", "build_passkey_spec", "run_passkey"]
