"""How llama.cpp reads RoPE: the GGUF keys it takes per architecture, and the CLI flags that override them.

Measured on llama-cpp-python 0.3.36 (its bundled llama.cpp, built for the CPU) by tests/compat/test_llama_cpp.py
and by hand on SmolLM2 (docs/compatibility.md):
- the YaRN ``beta_fast`` / ``beta_slow`` keys are read only by the architectures in ``YARN_BETA_ARCHS``; every
  other architecture (``llama`` included) uses 32 / 1 whatever the GGUF says, so only the flags set them;
- llama.cpp applies YaRN's attention factor 0.1 ln(s) + 1 itself, and ``--yarn-attn-factor`` alone is replaced by
  the GGUF's ``rope.scaling.attn_factor`` multiplier, so a non-default factor is passed with ``--override-kv``;
- a context (``-c``) above the GGUF's ``context_length`` (n_ctx_train) is accepted with a warning.

For a config.json, ``predict`` describes what llama.cpp computes after converting it to GGUF.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl.readers.base import DICT, FAILS, MAX_POS, TOP, Quirk, Reader, Reading, VersionRange
from ropectl.rope.params import YARN_DEFAULT_BETAS

ENGINE = "llama.cpp"
IGNORES_BETAS = "ignores-yarn-betas"  # the GGUF's yarn beta keys are not read for this architecture
DEFAULT_BETAS = YARN_DEFAULT_BETAS  # what llama.cpp uses where it does not read the GGUF's betas
# Architectures whose loader reads {arch}.rope.scaling.yarn_beta_fast/slow (llama-model.cpp); others use defaults.
YARN_BETA_ARCHS = frozenset({"grok", "mistral3"})
# The flag for each RoPE setting (common/arg.cpp); the attention multiplier goes through --override-kv (above).
FLAGS = {"type": "--rope-scaling", "factor": "--rope-scale", "theta": "--rope-freq-base",
         "original": "--yarn-orig-ctx", "beta_fast": "--yarn-beta-fast", "beta_slow": "--yarn-beta-slow",
         "attn": "--yarn-attn-factor", "context": "-c", "override": "--override-kv"}
ATTN_NEEDS_OVERRIDE_KV = True
_READS = ("{arch}.rope.freq_base", "{arch}.rope.scaling.type", "{arch}.rope.scaling.factor",
          "{arch}.rope.scaling.original_context_length", "{arch}.rope.scaling.attn_factor", "{arch}.context_length")
_ORIGINAL = {"yarn": (TOP, DICT, MAX_POS)}

READERS: tuple[Reader, ...] = (
    Reader(ENGINE, VersionRange("0.3.36"), _READS, ("{arch}.rope.scaling.yarn_beta_fast (most archs)",),
           _ORIGINAL, {}, "none enforced: -c above context_length (n_ctx_train) only warns", (
               Quirk(FAILS, "has no dynamic NTK scaling", rope_types=frozenset({"dynamic"}),
                     fix="use ntk or yarn for llama.cpp"),
               Quirk(IGNORES_BETAS, "reads YaRN beta_fast/beta_slow from the GGUF only for "
                     f"{', '.join(sorted(YARN_BETA_ARCHS))}; other architectures use 32/1",
                     rope_types=frozenset({"yarn"}),
                     fix="pass --yarn-beta-fast/--yarn-beta-slow (`ropectl patch ... --emit llama.cpp` prints them)"),
           ), ("llama-cpp-python 0.3.36",)),
)

# config.json model types whose GGUF architecture reads the beta keys (the converter keeps the name).
_BETA_MODEL_TYPES = frozenset({"grok", "mistral3"})


def cannot_express(rope_type: str) -> str | None:
    """Why llama.cpp cannot run ``rope_type`` at all (e.g. dynamic NTK), or None."""
    for quirk in READERS[-1].quirks:
        if quirk.kind == FAILS and rope_type in quirk.rope_types:
            return f"llama.cpp {quirk.note} ({quirk.fix})"
    return None


def reads_betas(arch: str) -> bool:
    return arch in YARN_BETA_ARCHS


def ignored_betas(arch: str, scaling: Mapping[str, Any]) -> dict[str, float]:
    """The non-default YaRN betas that a GGUF of ``arch`` carries but llama.cpp will not read."""
    if reads_betas(arch):
        return {}
    return {k: float(scaling[k]) for k, d in DEFAULT_BETAS.items()
            if scaling.get(k) is not None and abs(float(scaling[k]) - d) > 1e-12}


def predict(reader: Reader, config: Mapping[str, Any], version: str | None = None) -> Reading:
    """What llama.cpp computes for ``config`` once converted to GGUF (betas as it reads them)."""
    from ropectl.readers import transformers as tf
    from ropectl.schema.read import text_config

    base = tf.predict(tf.READERS[-1], config)  # the converter reads config.json as transformers 5 does
    if not base.ok:
        return Reading(reader, error=base.error, notes=base.notes)
    model_type = str(text_config(config).get("model_type") or "")
    ropes, notes = {}, list(base.notes)
    for layer, p in base.ropes.items():
        for quirk in reader.quirks_for(model_type, p.rope_type):
            if quirk.kind == FAILS:
                return Reading(reader, error=quirk.note, notes=tuple(notes))
            if quirk.kind == IGNORES_BETAS and model_type not in _BETA_MODEL_TYPES and ignored_betas("", p.scaling):
                p = p.with_(scaling={**p.scaling, **DEFAULT_BETAS})
                notes.append(quirk.note)
        ropes[layer] = p
    return Reading(reader, ropes, notes=tuple(dict.fromkeys(notes)), serving_length=None)
