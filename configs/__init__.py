"""The named presets, installed as the package ``ropectl.configs`` (see pyproject.toml and ropectl/presets.py).

``patch-NAME.toml`` files are ``patch --preset NAME``; ``eval-NAME.toml`` files are ``eval-ppl --preset NAME``.
"""
