"""Every per-model-type table, as data: config keys, aliases and strict config classes (``config``), and q/k
weight layouts (``layouts``). The schema, the engines, patch and layout read these; nothing here imports them.
"""

from ropectl.families.config import *  # noqa: F403 (the tables are the package's API)
