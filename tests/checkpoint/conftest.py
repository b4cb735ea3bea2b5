from __future__ import annotations

import pytest
from support.tiny_models import tiny_model


@pytest.fixture
def model():
    return tiny_model()
