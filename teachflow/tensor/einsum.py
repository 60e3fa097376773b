"""``tfl.einsum("bij,bjk->bik", a, b)``: Einstein's summation, lowered to the ops a learner knows.

An equation names each axis of each operand with a letter. A letter in two operands pairs their
axes; a letter missing from the output (after ``->``; without one, the letters used once, in
alphabetical order) is summed over. There is no einsum op: the equation becomes, step by step,

1. a letter twice in one operand (``"ii->i"``): its diagonal (`Tensor.diagonal`, index arrays);
2. a letter no other operand and not the output needs: summed away at once (``sum``);
3. the operands, left to right, contracted in pairs by *one batched matrix product*: each is
   transposed to (batch letters, its own letters, the summed letters) and reshaped to three
   axes, ``(B, M, K) @ (B, K, N)``, and the product reshaped back (``transpose``, ``reshape``,
   ``matmul``);
4. the result transposed to the output's order.

So its gradient, its forward mode and its batching are those ops' own, and the stepper shows
the matmul that does the work. (Sizes must agree letter by letter: no broadcasting of size-1
axes, and no ``...``.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from teachflow.core.errors import ArgumentError, ShapeError
from teachflow.tensor.tensor import Tensor, as_tensor

__all__ = ["einsum"]


def einsum(equation: str, *operands: Any) -> Tensor:
    """Sum products of the operands' elements as `equation` says (see the module docstring):
    ``einsum("ij,jk->ik", a, b)`` is ``a @ b``, ``einsum("ii", m)`` the trace, ``einsum("i,j->ij",
    u, v)`` the outer product. The operands may also come as one list, as PyTorch takes them."""
    if len(operands) == 1 and isinstance(operands[0], list | tuple):
        operands = tuple(operands[0])
    xs = [as_tensor(x) for x in operands]
    terms, output = _parse(equation, xs)
    sizes: dict[str, int] = {}
    for k, (term, x) in enumerate(zip(terms, xs, strict=True)):
        for letter, size in zip(term, x.shape, strict=True):
            if size is None:
                raise ShapeError(f"einsum needs every size, and operand {k}'s shape is {x.shape}",
                                 op="einsum", hint="trace with known sizes (no None)")
            if sizes.setdefault(letter, size) != size:
                raise ShapeError(
                    f"einsum {equation!r}: letter {letter!r} has size {sizes[letter]} in one "
                    f"operand and {size} in operand {k} (shapes "
                    f"{', '.join(str(x.shape) for x in xs)})", op="einsum",
                    hint="a letter names one axis size everywhere it appears")
    pairs = [_diagonals(x, list(term)) for x, term in zip(xs, terms, strict=True)]
    x, letters = pairs[0]
    for k, (y, other) in enumerate(pairs[1:], start=1):
        later = set(output).union(*(t for _, t in pairs[k + 1:]))
        x, letters = _summed(x, letters, set(other) | later)
        y, other = _summed(y, other, set(letters) | later)
        x, letters = _contracted(x, letters, y, other, later, sizes)
    x, letters = _summed(x, letters, set(output))
    order = tuple(letters.index(letter) for letter in output)
    return x if order == tuple(range(len(order))) else x.permute(*order)


def _parse(equation: Any, xs: list[Tensor]) -> tuple[list[str], str]:
    if not isinstance(equation, str):
        raise ArgumentError(f"einsum's first argument is the equation (a str), not "
                            f"{type(equation).__name__}", op="einsum",
                            hint='e.g. tfl.einsum("ij,jk->ik", a, b)')
    text = equation.replace(" ", "")
    lhs, arrow, output = text.partition("->")
    terms = lhs.split(",")
    letters = "".join(terms)
    if "." in text:
        raise ArgumentError(f"einsum {equation!r}: teachflow's einsum has no '...'", op="einsum",
                            hint="name every axis with a letter")
    if not all(c.isalpha() for c in letters + output):
        raise ArgumentError(f"einsum {equation!r}: axes are named by letters", op="einsum")
    if len(terms) != len(xs):
        raise ArgumentError(f"einsum {equation!r} names {len(terms)} operand(s) and was given "
                            f"{len(xs)}", op="einsum")
    for k, (term, x) in enumerate(zip(terms, xs, strict=True)):
        if len(term) != x.ndim:
            raise ShapeError(f"einsum {equation!r}: {term!r} names {len(term)} axes of operand "
                             f"{k}, whose shape {x.shape} has {x.ndim}", op="einsum",
                             hint="one letter per axis")
    if not arrow:
        output = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    if len(set(output)) != len(output) or not set(output) <= set(letters):
        raise ArgumentError(f"einsum {equation!r}: the output {output!r} must name input letters, "
                            "each once", op="einsum")
    return terms, output


def _diagonals(x: Tensor, letters: list[str]) -> tuple[Tensor, list[str]]:
    """`x` with each letter it repeats read along its diagonal (which comes last)."""
    for letter in dict.fromkeys(letters):
        while letters.count(letter) > 1:
            a = letters.index(letter)
            b = letters.index(letter, a + 1)
            x = x.diagonal(0, a, b)
            letters = [c for k, c in enumerate(letters) if k not in (a, b)] + [letter]
    return x, letters


def _summed(x: Tensor, letters: list[str], needed: set[str]) -> tuple[Tensor, list[str]]:
    """`x` with the axes of the letters nobody needs summed away."""
    gone = tuple(k for k, c in enumerate(letters) if c not in needed)
    if not gone:
        return x, letters
    return x.sum(axis=gone), [c for c in letters if c in needed]


def _contracted(x: Tensor, xl: list[str], y: Tensor, yl: list[str], later: set[str],
                sizes: dict[str, int]) -> tuple[Tensor, list[str]]:
    """One batched matrix product: ``(batch, x's own, summed) @ (batch, summed, y's own)``."""
    batch = [c for c in xl if c in yl and c in later]
    summed = [c for c in xl if c in yl and c not in later]
    mine, theirs = [c for c in xl if c not in yl], [c for c in yl if c not in xl]

    def laid_out(t: Tensor, letters: list[str], groups: Sequence[list[str]]) -> Tensor:
        order = [letters.index(c) for group in groups for c in group]
        if order != list(range(len(order))):
            t = t.permute(*order)
        return t.reshape(tuple(math.prod(sizes[c] for c in group) for group in groups))

    product = laid_out(x, xl, (batch, mine, summed)) @ laid_out(y, yl, (batch, summed, theirs))
    letters = batch + mine + theirs
    return product.reshape(tuple(sizes[c] for c in letters)), letters
