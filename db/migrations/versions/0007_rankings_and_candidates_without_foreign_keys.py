"""rankings and candidates without foreign-key constraints to prompts, annotators and raw records

Written as 0005 wrote the ranking items: a ranking is written in the transaction that
finds or creates its prompt, annotator and raw record, a candidate in the one that finds
or creates its prompt, and preflab deletes none of them, so the references hold by
construction. On Postgres each constraint cost a trigger per row: the candidates' and
rankings' COPYs of a 10,000-task Label Studio sync took 1.38 s with them and 0.71 s
without (bench/README.md, issue 15).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# (table, constraint, column, referred table, ondelete)
DROPPED = (
    ("rankings", "fk_rankings_prompt_id_prompts", "prompt_id", "prompts", "CASCADE"),
    ("rankings", "fk_rankings_annotator_id_annotators", "annotator_id", "annotators", None),
    ("rankings", "fk_rankings_raw_record_id_raw_records", "raw_record_id", "raw_records", None),
    ("candidates", "fk_candidates_prompt_id_prompts", "prompt_id", "prompts", "CASCADE"),
)


def upgrade() -> None:
    for table in ("rankings", "candidates"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            for _, name, *_ in (d for d in DROPPED if d[0] == table):
                batch_op.drop_constraint(name, type_="foreignkey")


def downgrade() -> None:
    for table in ("rankings", "candidates"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            for _, name, column, referred, ondelete in (d for d in DROPPED if d[0] == table):
                batch_op.create_foreign_key(name, referred, [column], ["id"], ondelete=ondelete)
