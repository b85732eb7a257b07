"""``ropectl inspect``: a checkpoint's RoPE as the model will use it (``report``), and its wavelength plot (``plot``)."""

from ropectl.inspection.report import InspectReport, InspectSpec, card_summary, inspect_model

__all__ = ["InspectReport", "InspectSpec", "card_summary", "inspect_model"]
