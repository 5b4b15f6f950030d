"""Fixtures shared by tests/python and tests/gpu."""

import numpy as np
import pytest


@pytest.fixture
def rng():
    """A generator from fresh entropy, its seed printed (pytest shows it for a failure) so
    that a failing draw can be replayed with np.random.default_rng(seed). Files that draw
    once per module define their own module-scoped rng."""
    seed = np.random.SeedSequence().entropy
    print(f"seed = {seed}")
    return np.random.default_rng(seed)
