"""PyTorch's and NumPy's habits: how a tensor's methods answer to other libraries' names.

Learners arrive writing ``x.sum(dim=1, keepdim=True)``, ``x.squeeze(axis=0)`` or ``x.clamp(0, 1)``.
Each such name is written beside the method it stands for, in the file of that method's kind
(``clamp`` beside ``clip`` in `teachflow.tensor.elementwise`); this module is how they are read:
`named` takes a keyword under the other library's name (``dim=`` for ``axis=``),
`unknown_keyword` says which keyword was meant when none fits, and a `ForeignName` is a method
teachflow spells otherwise, which says what to write instead.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

from teachflow.core.errors import ArgumentError

#: A keyword a call does not take, and the one of the call's that it names: PyTorch's ``dim=``
#: and ``keepdim=`` for NumPy's ``axis=`` and ``keepdims=`` (``x.sum(dim=1, keepdim=True)``),
#: NumPy's ``axis=`` where teachflow takes PyTorch's ``dim=`` (``x.squeeze(axis=0)``).
OTHER_NAMES = {"dim": "axis", "keepdim": "keepdims", "axis": "dim"}

#: Keywords of other libraries that no keyword here means, and what to write instead.
NO_TWIN = {"unbiased": "correction=0 for unbiased=False, correction=1 (the default) for True",
           "ddof": "correction= (NumPy's ddof=0 is correction=0)"}


class DefaultAxis(int):
    """An axis the call left at its default (-1 for softmax, 0 for concatenate): told apart from
    the same number given (by identity), so that ``dim=`` beside it is not an axis given twice.
    It prints as the number, which is what ``help()`` shows."""

    __slots__ = ()

    def __repr__(self) -> str:
        return int.__repr__(self)


LAST_AXIS, FIRST_AXIS = DefaultAxis(-1), DefaultAxis(0)


def named(op: str, other: dict, **ours: Any) -> tuple:
    """The values of `ours` (a call's ``axis=``, ``keepdims=``, ... in order), each replaced by
    what `other` (the keywords the call took without naming them) gives for it under another
    library's name: ``x.sum(dim=1)`` is ``x.sum(axis=1)``, eagerly and traced alike. Any other
    keyword, or one value given under both names, is an `ArgumentError`."""
    values = dict(ours)
    for name, value in other.items():
        ours_name = OTHER_NAMES.get(name)
        if ours_name not in ours:
            raise unknown_keyword(op, name, [*ours, *(n for n, o in OTHER_NAMES.items()
                                                      if o in ours)])
        if _given(ours[ours_name]):
            raise ArgumentError(f"{op}() got {ours_name}={ours[ours_name]!r} and {name}="
                                f"{value!r}, one {ours_name} under two names ({name}= is "
                                f"{'PyTorch' if name != 'axis' else 'NumPy'}'s name for it)",
                                op=op, hint=f"give one of them: {op}(..., {ours_name}=...)")
        values[ours_name] = value
    return tuple(values.values())


def _given(value: Any) -> bool:
    """Did the call give this value, rather than leave it at its default?"""
    return value is not None and value is not False and not isinstance(value, DefaultAxis)


def unknown_keyword(op: str, name: str, accepted: Sequence[str]) -> ArgumentError:
    """A keyword `op` does not take, said as Python says it, with the keyword meant where one
    of `accepted` is spelled alike (``axes=`` for ``axis=``)."""
    close = difflib.get_close_matches(name, accepted, n=1)
    hint = (f"did you mean {close[0]}=?" if close else f"write {NO_TWIN[name]}" if
            name in NO_TWIN else f"it takes {', '.join(f'{a}=' for a in accepted)}" if accepted
            else f"help(tfl.{op}) lists what it takes")
    return ArgumentError(f"{op}() got an unexpected keyword argument {name!r}", op=op, hint=hint)


class ForeignName:
    """A PyTorch or NumPy name that teachflow spells otherwise, declared in a class body beside
    the method meant (``clamp = ForeignName("x.clip(min, max)")``): reading it on a tensor raises
    the AttributeError Python would, saying what to write instead. (A class attribute rather
    than ``__getattr__``: defining ``__getattr__`` would slow down every attribute read of every
    tensor.) Names teachflow has too, such as ``view`` or ``permute``, are methods."""

    def __init__(self, spelling: str) -> None:
        self.spelling = spelling

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        raise AttributeError(f"'Tensor' object has no attribute '{self.name}': teachflow spells "
                             f"it {self.spelling}", name=self.name, obj=instance)
