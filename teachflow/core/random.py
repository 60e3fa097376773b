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
