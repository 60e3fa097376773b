"""Random numbers you can reproduce: ``tfl.manual_seed(n)``.

Each array module (NumPy, CuPy) gets its own generator, created from the current seed when first
used. Seeding resets them all, so a seeded program draws the same numbers on every run.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from teachflow.core.errors import DTypeError

_seed: int | None = None
_generators: dict[str, Any] = {}


def manual_seed(seed: int) -> None:
    """Seed every device's random generator (like ``torch.manual_seed``)."""
    global _seed
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise DTypeError(f"a seed is an int, not {type(seed).__name__} {seed!r}",
                         op="manual_seed", hint="e.g. tfl.manual_seed(0)")
    _seed = int(seed)
    _generators.clear()


def generator(xp: ModuleType) -> Any:
    """The random generator of an array module (``xp.random.default_rng``)."""
    rng = _generators.get(xp.__name__)
    if rng is None:
        rng = _generators[xp.__name__] = xp.random.default_rng(_seed)
    return rng



def rng_state() -> dict[str, tuple[Any, Any]]:
    """Where every generator made so far stands (as ``torch.get_rng_state``): give it to
    `set_rng_state` to draw the same numbers again (``tfl.checkpoint`` does, to draw a dropout
    mask again)."""
    return {name: (rng, rng.bit_generator.state) for name, rng in _generators.items()}


def set_rng_state(state: dict[str, tuple[Any, Any]]) -> None:
    """Put the generators back where `rng_state` found them. One made since is dropped: it was
    made from the seed, and its next draw makes it again from the seed."""
    _generators.clear()
    for name, (rng, bits) in state.items():
        rng.bit_generator.state = bits
        _generators[name] = rng
