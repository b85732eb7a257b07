"""Every per-model-type table, as data: config keys, aliases and strict config classes (``config``), q/k weight
layouts (``layouts``) and GGUF architectures (``gguf``). The schema, engines, patch and layout read these; nothing
here imports them.
"""

from ropectl.families.config import *  # noqa: F403 (the tables are the package's API)
from ropectl.families.gguf import GGUF_ARCHS  # noqa: F401
