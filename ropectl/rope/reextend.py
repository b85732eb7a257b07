"""Re-extension: a new factor or target for a model that ships already scaled (Llama 3.1 llama3 8k->128k,
gpt-oss yarn x32, Mistral 4 yarn, Apertus / CWM / Higgs llama3).

The published scaling is measured from the model's true pretraining length (original_max_position_embeddings),
so the new one is too: the unscaled base is (rope_theta, original length), the factor the user gives counts from
that length, and a re-extension with the model's own method keeps the model's own options (YaRN betas, mscale,
truncate; llama3 frequency bands) unless the user overrides them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ropectl.rope.methods import MethodSpec, effective_factor, find_method, owner_of
from ropectl.rope.params import RopeParams

# Which types can be undone exactly, and which of the shipped options a re-extension keeps, are the method
# records' ``reextendable`` and ``carried_options``.


@dataclass(frozen=True)
class Reextension:
    """The scaling the model shipped with, and where the new one starts from."""

    shipped: RopeParams
    original: int

    @property
    def shipped_context(self) -> int:
        """The context the shipped config serves: its max_position_embeddings where that is longer than original x
        factor (llama3 reaches 131072 from 8192 with factor 8; Llama 4 states 10,485,760), else original x factor
        (configs that keep max_position_embeddings at the original, as Qwen's yarn form does)."""
        return shipped_context(self.shipped, self.original)

    @property
    def shipped_label(self) -> str:
        """``llama3 x8``: the shipped type and factor."""
        return f"{self.shipped.rope_type} x{self.shipped.factor:g}" if self.shipped.factor else self.shipped.rope_type

    def summary(self, new: RopeParams, factor: float | None) -> str:
        own = self.shipped_label
        if factor is None:  # a method without a factor (none): the shipped scaling is removed, nothing replaces it
            return (f"the model ships {own} ({self.original} -> {self.shipped_context}); this removes it: the unscaled "
                    f"base, theta {new.rope_theta:g} at the original {self.original} (max positions "
                    f"{new.max_position_embeddings})")
        target = int(round(self.original * factor)) if factor else new.max_position_embeddings
        line = (f"re-extension: the model ships {own} ({self.original} -> {self.shipped_context}); the new "
                f"{new.rope_type} x{factor:g} is measured from the original {self.original} (-> {target}), "
                "replacing the shipped scaling instead of stacking on it")
        if target is not None and target <= self.shipped_context:
            line += f"; note the new context {target} is not beyond the shipped {self.shipped_context}"
        return line


def shipped_context(rope: RopeParams, original: int | None) -> int:
    """The context a config serves as it ships: max_position_embeddings where that is longer than original x factor
    (llama3 reaches 131072 from 8192 with factor 8), else original x factor (Qwen's yarn form and dynamic keep
    max_position_embeddings at the original)."""
    factor = effective_factor(rope) or 1.0
    return max(int(round((original or 0) * factor)), int(rope.max_position_embeddings or 0))


def reextension_of(rope: RopeParams) -> Reextension | None:
    """A Reextension when ``rope`` is a published scaling of a ``reextendable`` type (yarn, llama3) with a known
    original length."""
    original = rope.original_max_position_embeddings
    owner = owner_of(rope.rope_type)
    if owner is None or not owner.reextendable or not original:
        return None
    return Reextension(rope, int(original))


def unscaled_base(re: Reextension, rotary_dim: int) -> RopeParams:
    return RopeParams("default", re.shipped.rope_theta, rotary_dim, re.original, {})


def with_carried_options(re: Reextension, spec: MethodSpec) -> MethodSpec:
    """``spec`` plus the shipped method's own options the user did not set (same method only)."""
    if spec.name != re.shipped.rope_type:
        return spec
    given = {k for k, _ in spec.options}
    method = find_method(spec.name)
    carried = tuple((k, re.shipped.scaling[k]) for k in (method.carried_options if method else ())
                    if k not in given and re.shipped.scaling.get(k) is not None)
    return replace(spec, options=spec.options + carried)
