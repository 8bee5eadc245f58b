"""The drivers' old call forms, accepted for one release with a ``DeprecationWarning``.

Every autoregressive driver is now ``driver(lm, prompt, *, constraint=None, ...)``.
Before, ``generate`` took its constraint (and its decoding settings) positionally,
``smc`` its constraint, ``diffusion_generate`` its constraint as the second
argument and the prompt as the keyword ``prompt=``, and some drivers named their
arguments ``model`` or ``prompt_ids``. :func:`accepts_old_call_forms` maps such a
call onto the new signature and warns once per call site; delete it, and its
uses, in the release after.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from typing import Callable, Mapping, Sequence

__all__ = ["accepts_old_call_forms"]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def accepts_old_call_forms(old_positional: Sequence[str] = (), *, renamed: Mapping[str, str] | None = None,
                           is_old: Callable[..., bool] | None = None):
    """A decorator that lets a driver accept its old call forms, with a warning.

    Args:
        old_positional: the old names, in order, of the positional arguments after
            the first (the model, which never moved). A call with more positional
            arguments than the new signature has (or one that ``is_old`` flags)
            is read with these names; an argument whose old name is not the new
            positional parameter at its place is passed by keyword instead.
        renamed: ``{old keyword: new keyword}`` for renamed arguments.
        is_old: ``is_old(positional_args, keyword_args) -> bool``: whether a call
            whose number of positional arguments fits the new signature still
            follows the old layout (``diffusion_generate(model, constraint)``: the
            second argument is a constraint, not a prompt).

    The wrapped function keeps its signature and docstring (``inspect.signature``
    shows the new form). A call in the new form costs one length test.
    """
    renamed = dict(renamed or {})

    def decorate(fn):
        params = inspect.signature(fn).parameters.values()
        new_positional = [p.name for p in params if p.kind in _POSITIONAL]
        old = new_positional[:1] + list(old_positional)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            moved: list[str] = []
            renames: list[str] = []
            if len(args) > len(new_positional) or (is_old is not None and is_old(args, kwargs)):
                if len(args) > max(len(old), len(new_positional)):
                    # the most either form takes (beam_search takes lm and
                    # prompt; it had no longer old form)
                    raise TypeError(f"{fn.__name__}() takes at most "
                                    f"{max(len(old), len(new_positional))} positional arguments "
                                    f"({len(args)} given)")
                keep = 0
                while keep < len(args) and keep < len(new_positional) and old[keep] == new_positional[keep]:
                    keep += 1
                for name, value in zip(old[keep:], args[keep:]):
                    if name in kwargs:
                        raise TypeError(f"{fn.__name__}() got multiple values for argument {name!r}")
                    kwargs[name] = value
                    moved.append(name)
                args = args[:keep]
            for old_kw, new_kw in renamed.items():
                if old_kw in kwargs:
                    if new_kw in kwargs:
                        raise TypeError(f"{fn.__name__}() got both {old_kw!r} and {new_kw!r}")
                    kwargs[new_kw] = kwargs.pop(old_kw)
                    renames.append(f"{new_kw}= for {old_kw}=")
            if moved or renames:
                fix = ([f"pass {', '.join(moved)} by keyword"] if moved else []) + \
                      ([f"write {', '.join(renames)}"] if renames else [])
                warnings.warn(
                    f"{fn.__name__}(): this call form is deprecated and stops working in the next release: "
                    f"{'; '.join(fix)} (the drivers' form is driver(lm, prompt, *, constraint=None, ...))",
                    DeprecationWarning, stacklevel=2)
            return fn(*args, **kwargs)

        return wrapper

    return decorate
