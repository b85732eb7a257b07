"""``ropectl verify``: the checkpoint a user ships, scored on the same token ids in every engine that will serve it
(docs/reference/verify.md). ``run_verify(VerifySpec, say) -> VerifyResult``; search's winner check calls it."""

from ropectl.verify.run import run_verify
from ropectl.verify.spec import EngineRow, VerifyResult, VerifySpec

__all__ = ["EngineRow", "VerifyResult", "VerifySpec", "run_verify"]
