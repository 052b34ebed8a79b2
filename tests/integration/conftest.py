"""Fixtures for integration tests that start real qcluster processes (tests/fault/qcluster.py)."""

from __future__ import annotations

import pytest

from tests.fault.qcluster import Clusters


@pytest.fixture
def clusters(tmp_path):
    manager = Clusters(tmp_path)
    yield manager
    manager.stop_all()
