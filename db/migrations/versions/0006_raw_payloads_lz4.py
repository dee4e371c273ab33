"""raw payloads compressed with lz4 on Postgres

A Label Studio task with its annotations is a few kilobytes of JSON, over the size
at which Postgres compresses a value, and its default compressor (pglz) is slow:
the raw records took 1.57 s of a 10,000-task sync's COPYs with pglz and 0.92 s with
lz4, for 12 % more space (bench/README.md, issue 15). Only on a server built with
lz4 (Postgres 14 and later, as Debian's is); SQLite stores text as it is.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def _lz4_available() -> bool:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return False
    values = bind.scalar(sa.text("SELECT enumvals FROM pg_settings WHERE name = 'default_toast_compression'"))
    return bool(values) and "lz4" in values


def upgrade() -> None:
    if _lz4_available():
        op.execute("ALTER TABLE raw_records ALTER COLUMN payload SET COMPRESSION lz4")


def downgrade() -> None:
    if _lz4_available():
        op.execute("ALTER TABLE raw_records ALTER COLUMN payload SET COMPRESSION DEFAULT")
