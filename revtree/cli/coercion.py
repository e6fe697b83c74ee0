"""Typer's coercion of a parameter, without pydantic where there is nothing to coerce.

typer (0.2x) coerces every parameter's value through a pydantic ``TypeAdapter`` built on
the first value, even a value that is already what it should be: ``show RUN`` loads
pydantic (50-60 ms of imports) to turn the string
``RUN`` into the string ``RUN``. :func:`install` wraps typer's ``get_runtime_param`` so
that a parameter annotated plain ``str``, ``int``, ``float`` or ``bool`` (no parser,
range or file) whose value is None or already of exactly that type (``--help``'s None, a
default) is passed as it is; any other value (``--node 1`` arrives as the string
``"1"``) and any other annotation go to typer's own coercion, built then, with its own
messages. What this passes through is what typer's coercion returns for it
(tests/orchestrator/test_light_imports.py checks both agree, and that a read command
loads no pydantic).

It relies on typer's ``_TyperParameter.get_runtime_param`` (typer 0.2x); on a typer
without it, :func:`install` does nothing and typer coerces as it always does.
"""

from __future__ import annotations

from typing import Any

PLAIN = (str, int, float, bool)


class PassThrough:
    """The runtime coercion of one plain parameter: the value as it is where it already
    has the type, else typer's (built on first need)."""

    def __init__(self, param: Any, full: Any) -> None:
        self.param, self.full = param, full

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None or type(value) is self.param.type_descriptor.annotation:
            return value
        self.param._runtime_param = None  # typer's own from now on
        return self.full(self.param).coerce(value, param=param, ctx=ctx)


def plain(param: Any) -> bool:
    """Whether typer's coercion of this parameter is the identity on values of its type."""
    d = getattr(param, "type_descriptor", None)
    info = getattr(d, "parameter_info", None)
    return (
        d is not None
        and d.annotation in PLAIN
        and d.file_annotation is None
        and not (param.multiple or param.nargs != 1)
        and getattr(info, "parser", None) is None
        and getattr(info, "min", None) is None
        and getattr(info, "max", None) is None
    )


def install() -> bool:
    """Wrap typer's ``get_runtime_param`` (once); False where this typer has none."""
    try:
        from typer.core import _TyperParameter
    except ImportError:
        return False
    full = getattr(_TyperParameter, "get_runtime_param", None)
    if full is None or getattr(full, "revtree", False):
        return full is not None

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None and plain(self):
            self._runtime_param = PassThrough(self, full)
        return full(self)  # typer's: the one set, else built

    get_runtime_param.revtree = True  # type: ignore[attr-defined]
    _TyperParameter.get_runtime_param = get_runtime_param  # type: ignore[method-assign]
    return True
