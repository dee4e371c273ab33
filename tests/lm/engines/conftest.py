"""The fault-injecting OpenAI-compatible app on a loopback port, one per test (tests/fault_app.py)."""

from __future__ import annotations

import pytest

from tests.fault_app import Faults, serve


@pytest.fixture
def fault_server():
    """(base URL, the app's Faults): set faults on it, read what it was asked from it."""
    stops = []

    def start(**settings):
        url, faults, stop = serve(Faults(**settings))
        stops.append(stop)
        return url, faults

    yield start
    for stop in stops:
        stop()


@pytest.fixture
def engine_for(sessions):
    """An openai engine on the test's store (SQLite and Postgres), closed after the test."""
    from preflab.lm.engines import EngineConfig, open_engine

    engines = []

    def make(url: str, model: str = "fault-model", **settings):
        engine = open_engine(EngineConfig(engine="openai", api_base=url, model=model, **settings), sessions)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()


@pytest.fixture(autouse=True)
def no_outside_server(monkeypatch):
    """The commands' options read the first two from the environment, the engine its key: a developer's own must
    not reach the tests."""
    for name in ("PREFLAB_ENGINE", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
