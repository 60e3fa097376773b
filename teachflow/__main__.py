"""``python -m teachflow``: the ``teachflow`` command (`teachflow.grading.cli`)."""

import sys

from teachflow.grading.cli import main

sys.exit(main())
