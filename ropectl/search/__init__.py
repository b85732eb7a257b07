"""``ropectl search``: searching scaling parameters on the model itself."""
