"""Fixed seeds: a test that draws random numbers grades the same every time.

A test that checks a learner's function on random inputs (``x = np.random.randn(4, 3)``), or
whose learner's code draws them (weights initialised at random, a dropout mask), would give
another score on another run if the random generators went on from wherever the last test
left them. So each test function starts as a fresh, seeded program would, on both sides of
the sandbox's wall:

- on the tests' side, just before pytest sets the test up (`teachflow.grading.testcell`: its
  fixtures draw from seeded generators too);
- in the worker that runs the learner's code, by a ``{"op": "seed"}`` request
  (`teachflow.grading.submission`), and once when the worker starts, before the learner's
  cells run, so a worker started again after a timeout draws as the first one did.

`seed_everything` seeds the three generators a notebook draws from: Python's `random`,
NumPy's global state (``np.random.rand``) and teachflow's (``tfl.manual_seed``). Every test
starts from the same `SEED`: grading twice gives the same scores, and so do ``teachflow
check`` and ``teachflow grade``. ``tfl.grading.check()`` runs the tests in the learner's own
kernel, so it gives the kernel its generators back as it found them (`kept`); there the two
sides are one process with one set of generators, so a test that compares what both sides
draw (``coin() == random.random()``) holds when graded, not in the kernel.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import numpy as np

from teachflow.core import random as core_random
from teachflow.core.random import manual_seed

#: The seed every test starts from.
SEED = 0


def seed_everything(seed: int) -> None:
    """Seed Python's `random`, NumPy's global generator and teachflow's with `seed`."""
    random.seed(seed)
    np.random.seed(seed)
    manual_seed(seed)


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """Run the block, then put the three generators back where they stood before it."""
    python, numpy = random.getstate(), np.random.get_state()
    seed, generators = core_random._seed, core_random.rng_state()
    try:
        yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy)
        core_random._seed = seed  # (None when the kernel never seeded: drawn from entropy)
        core_random.set_rng_state(generators)
