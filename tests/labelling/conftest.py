"""Fixtures for the labelling tests: a real Label Studio server (see ls_fixtures)."""

import os

from tests.labelling.ls_fixtures import (  # noqa: F401  (fixtures)
    label_studio_bin_path,
    lcli,
    ls_env,
    ls_server,
    start_server,
    started_elsewhere,
    stop_server,
    uses_label_studio,
)


def pytest_collection_finish(session):
    # Label Studio takes minutes to migrate a fresh database: start it now, so it
    # gets ready while the tests before the first one that needs it run.
    if (
        uses_label_studio(session.items)
        and not session.config.option.collectonly
        and not started_elsewhere()
        and os.access(label_studio_bin_path(), os.X_OK)
    ):  # else the fixture fails with the reason
        start_server()


def pytest_sessionfinish(session, exitstatus):
    stop_server()
