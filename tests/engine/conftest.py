"""Fixtures shared by the engine tests."""

import pytest

from engine_under_test import ModelConfig
from engine_under_test.model import build_model


@pytest.fixture(scope="module")
def model():
    """The tiny preset with seed-0 weights, fp32, CPU (read-only: tests never train)."""
    return build_model(ModelConfig.preset("tiny", seed=0))
