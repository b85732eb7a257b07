"""Families, config schemas (read and write), the published fixture configs and the model sweep."""
