"""Module attributes loaded on first access (PEP 562), so importing a package stays cheap."""

from __future__ import annotations

import importlib
import warnings

__all__ = ["lazy_attributes", "require"]


def lazy_attributes(package: str, names: dict[str, str], namespace: dict, public: list[str],
                    moved: dict[str, str] | None = None):
    """`__getattr__` and `__dir__` for `package`: `names` maps each lazy name to its module.

    A loaded name is stored in `namespace` (the package's globals) so later lookups are plain.
    `moved` maps names this package no longer defines to the public package that now does:
    they still load, with a DeprecationWarning naming the new spelling, and are left out of
    `__dir__`.
    """

    def __getattr__(name: str):
        module = names.get(name)
        if module is None and moved and name in moved:
            warnings.warn(f"{package}.{name} is the round-3 spelling and goes away in the next "
                          f"release: import {name} from {moved[name]} (docs/coming-from.md, "
                          "\"Migrating from round 3\")", DeprecationWarning, stacklevel=2)
            return getattr(importlib.import_module(moved[name]), name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted(public)

    return __getattr__, __dir__


def require(module: str, extra: str):
    """Import an optional dependency, or raise BackendUnavailableError naming the extra that
    installs it."""
    from chute.errors import BackendUnavailableError

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise BackendUnavailableError(
            f"{module} is needed here but cannot be imported ({exc}); install it with "
            f"`pip install chute[{extra}]`") from exc
