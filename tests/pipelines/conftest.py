"""Fixtures shared by the Pipeline tests."""

import pytest

import chute.pipelines.producers._registry as producer_registry


@pytest.fixture
def ids_backend(monkeypatch):
    """Register the "test-ids" image producer (tests/pipelines/_id_backend.py) for one test."""
    monkeypatch.setitem(producer_registry.PRODUCERS, "test-ids", "tests.pipelines._id_backend")
    from tests.pipelines import _id_backend

    return _id_backend
