"""Host memory a CPU training step gives back: freed tensors that glibc's allocator keeps.

glibc serves allocations under its mmap threshold (raised on the fly up to 32 MB) from its heap and keeps what is
freed there for reuse; a 4k-token step frees hundreds of such tensors (layer activations, the previous step's
gradients) and then allocates differently shaped ones, so the process's resident memory grows well past what is live.
Measured on SmolLM2's shape at 4k (docs/reference/finetune-benchmark.md): about 1.5 GB of a 4.7 GB peak was freed
memory glibc kept. ``malloc_trim(0)`` hands every free page back to the kernel; called at the two points of a step
where the most is free (before the forward, and between the decoder body and the chunked head) it costs the page
faults of touching that memory again. Nothing happens off glibc (macOS, musl) or on a GPU.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any


@functools.cache
def _trim() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return getattr(libc, "malloc_trim", None)  # glibc only


def release_freed_memory(device: Any) -> None:
    """Give glibc's free heap pages back to the kernel, where the tensors live in host memory."""
    trim = _trim()
    if trim is not None and str(device).startswith("cpu"):
        trim(0)
