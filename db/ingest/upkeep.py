"""What a long import does beside its batches, whichever reader feeds them (JSON Lines or a dataset).

Python's cycle collector is paused for the import (`cycles_unchecked`), and Postgres is asked to sample
the tables the import looks rows up in as they grow (`sample_grown_tables`).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.orm import Session, sessionmaker

from preflab.db.bulk import refresh_statistics
from preflab.db.models import Annotator, Candidate, Prompt, Ranking, RawRecord
from preflab.db.transactions import in_transaction


@contextmanager
def cycles_unchecked() -> Iterator[None]:
    """Python's cycle collector paused for an import, and run once after it on what the import made.

    An import makes a batch's worth of parsed records at a time, none of them in a cycle (JSON values,
    records): their reference counts free them. The collector, run every few hundred allocations,
    scanned them again and again, a quarter of an import's CPU time (bench/README.md, issue 30).
    Afterwards only the youngest generation is collected, the objects made while it was paused: a full
    collection scans the whole process (85 ms of a 124 ms import of one row; more in a server or a test
    run holding pyarrow and datasets), whatever the import's size.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
            gc.collect(0)


# The tables an import looks rows up in, by a key it has a unique index on.
LOOKED_UP = (RawRecord.__table__, Prompt.__table__, Candidate.__table__, Annotator.__table__, Ranking.__table__)


def sample_grown_tables(sessions: sessionmaker[Session], batch: int) -> None:
    """After the 1st, 2nd, 4th, 8th… batch, have Postgres sample the tables an import looks rows up in.

    The lookups bind their keys as one array (`= ANY`); on a table grown from empty in this import,
    unsampled, the planner scanned the whole table for each chunk of keys instead of probing the unique
    index: on rows of about 1 kB, stored in the table itself, a 25,000-row oasst2 import spent 27 of its
    35 s there (bench/README.md, issue 30). Doubling the interval keeps the sampling a small share.
    """
    if batch & (batch - 1) == 0:  # run again if the connection is lost, as a batch is (`in_transaction`)
        in_transaction(sessions, lambda session: [refresh_statistics(session, table) for table in LOOKED_UP])
