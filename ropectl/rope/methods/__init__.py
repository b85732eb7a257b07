"""Scaling methods: one module each in this package, registered in :mod:`.registry`.

Adding a method is one module here (and its name in ``registry.BUILTIN``), or, outside the package, a module
registered through ``register_method``, the ``ropectl.methods`` entry points or ``ROPECTL_METHODS``; see
docs/contributing/add-a-method.md.
"""

from ropectl.rope.methods.common import ORIGINAL, is_prope, trained_length
from ropectl.rope.methods.options import (
    MethodSpec,
    apply_method,
    check_factor,
    factor_for_target,
    parse_spec,
    parse_value,
    resolve_file,
    validate_options,
)
from ropectl.rope.methods.registry import (
    METHODS,
    TARGET,
    TRAINED,
    Method,
    Param,
    as_is_name,
    default_candidates,
    effective_factor,
    find_method,
    first_where,
    get_method,
    gguf_owner,
    implied_factor,
    is_prope_type,
    load_all,
    method_names,
    method_of_type,
    owner_of,
    register_method,
    rope_types,
    rope_types_where,
    search_spaces,
    type_aliases,
    unscaled_name,
)

load_all()

__all__ = ["METHODS", "ORIGINAL", "TARGET", "TRAINED", "Method", "MethodSpec", "Param", "apply_method", "as_is_name",
    "check_factor", "default_candidates", "effective_factor", "factor_for_target", "find_method", "first_where",
    "get_method", "gguf_owner", "implied_factor", "is_prope", "is_prope_type", "method_names", "method_of_type",
    "owner_of", "parse_spec", "parse_value", "register_method", "resolve_file", "rope_types", "rope_types_where",
    "search_spaces", "trained_length", "type_aliases", "unscaled_name", "validate_options"]
