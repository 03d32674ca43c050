"""The rule registry: every Rule subclass in the modules of this package, by code.

A new rule family is a new module here; nothing else needs editing.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Dict, List, Type

from .base import Rule

_REGISTRY: Dict[str, Type[Rule]] = {}
# The modules here that hold no rule: the base class, the default set, the pages.
NOT_RULES = ("base", "default_set", "pages")


def _load() -> None:
    if _REGISTRY:
        return
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name in NOT_RULES or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and issubclass(obj, Rule)
                and obj is not Rule
                and getattr(obj, "code", None)
                and obj.__module__ == module.__name__
            ):
                if obj.code in _REGISTRY and _REGISTRY[obj.code] is not obj:
                    raise RuntimeError(f"two rules claim {obj.code}")
                _REGISTRY[obj.code] = obj


def all_rules() -> List[Type[Rule]]:
    _load()
    return [_REGISTRY[c] for c in sorted(_REGISTRY)]


def get_rule(code: str) -> Type[Rule]:
    _load()
    return _REGISTRY[code]


__all__ = ["Rule", "all_rules", "get_rule"]
