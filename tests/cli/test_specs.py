"""Specs (what a command asks the core for) are frozen, keyword-only dataclasses: a value passed by position to the
wrong field cannot happen, and a spec is never changed after its checks ran (``__post_init__``)."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

import pytest

import ropectl

# MethodSpec is a value (name, factor, options) parsed from "yarn:4,beta_fast=16", compared and hashed as one.
VALUES = {"MethodSpec"}


def specs() -> list[type]:
    found = {}
    for info in pkgutil.walk_packages(ropectl.__path__, "ropectl."):
        if ".cli." in info.name or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == info.name
                    and name.endswith(("Spec", "Request")) and name not in VALUES):
                found[f"{info.name}.{name}"] = obj
    return list(found.values())


def loose(cls: type) -> list[str]:
    """What makes ``cls`` not a frozen keyword-only spec."""
    out = [f"{cls.__name__}.{f.name} may be passed by position" for f in dataclasses.fields(cls)
           if f.init and not f.kw_only]
    return out + ([f"{cls.__name__} is not frozen"] if not cls.__dataclass_params__.frozen else [])  # type: ignore[attr-defined]


def test_every_spec_is_frozen_and_keyword_only() -> None:
    found = specs()
    assert len(found) >= 8, found
    assert [problem for cls in found for problem in loose(cls)] == []


@pytest.mark.parametrize("decorator", [dataclasses.dataclass(frozen=True), dataclasses.dataclass(kw_only=True)])
def test_the_check_sees_a_loose_spec(decorator: object) -> None:
    """Negative control: a positional field or a mutable spec is reported."""

    class DemoSpec:
        __annotations__ = {"model": str}

    assert loose(decorator(DemoSpec))  # type: ignore[operator]
