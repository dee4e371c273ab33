"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "annotators",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("name", sa.String(length=300), nullable=False),
        sa.Column("pseudonym", sa.String(length=40), nullable=False),
        sa.Column("ls_user_id", sa.Integer(), nullable=True),
        sa.Column("judge_kind", sa.String(length=40), nullable=True),
        sa.Column("model", sa.String(length=300), nullable=True),
        sa.Column("config", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_annotators")),
        sa.UniqueConstraint("name", "kind", name=op.f("uq_annotators_name_kind")),
        sa.UniqueConstraint("pseudonym", name=op.f("uq_annotators_pseudonym")),
    )
    op.create_table(
        "job_locks",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_job_locks")),
    )
    op.create_table(
        "ls_projects",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("base_url", sa.String(length=500), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("title", sa.String(length=300), nullable=False),
        sa.Column("template", sa.String(length=40), nullable=False),
        sa.Column("label_config", sa.Text(), nullable=False),
        sa.Column("synced_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ls_projects")),
        sa.UniqueConstraint("base_url", "project_id", name=op.f("uq_ls_projects_base_url_project_id")),
    )
    op.create_table(
        "model_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("base_model", sa.String(length=1000), nullable=True),
        sa.Column("parent_id", sa.Integer(), nullable=True),
        sa.Column("path", sa.String(length=1000), nullable=True),
        sa.Column("iteration", sa.Integer(), nullable=True),
        sa.Column("is_current", sa.Boolean(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["parent_id"], ["model_versions.id"], name=op.f("fk_model_versions_parent_id_model_versions")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_versions")),
        sa.UniqueConstraint("name", name=op.f("uq_model_versions_name")),
    )
    op.create_table(
        "pair_builds",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("strategy", sa.String(length=20), nullable=False),
        sa.Column("aggregate", sa.String(length=20), nullable=False),
        sa.Column("annotator_kind", sa.String(length=10), nullable=False),
        sa.Column("n_rankings", sa.Integer(), nullable=False),
        sa.Column("n_pairs", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pair_builds")),
    )
    op.create_table(
        "raw_records",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=40), nullable=False),
        sa.Column("origin", sa.String(length=500), nullable=True),
        sa.Column("locator", sa.String(length=200), nullable=True),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("payload_hash", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=12), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_raw_records")),
        sa.UniqueConstraint("payload_hash", "source", name=op.f("uq_raw_records_payload_hash_source")),
    )
    op.create_table(
        "dataset_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=True),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("n_train", sa.Integer(), nullable=False),
        sa.Column("n_test", sa.Integer(), nullable=False),
        sa.Column("n_prompts", sa.Integer(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("format", sa.String(length=10), nullable=False),
        sa.Column("path", sa.String(length=1000), nullable=True),
        sa.Column("hub_repo", sa.String(length=300), nullable=True),
        sa.Column("hub_revision", sa.String(length=100), nullable=True),
        sa.Column("iteration", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["build_id"], ["pair_builds.id"], name=op.f("fk_dataset_versions_build_id_pair_builds"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dataset_versions")),
        sa.UniqueConstraint("name", name=op.f("uq_dataset_versions_name")),
    )
    op.create_table(
        "prompts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("source", sa.String(length=200), nullable=True),
        sa.Column("reference", sa.Text(), nullable=True),
        sa.Column("split", sa.String(length=10), nullable=True),
        sa.Column("iteration", sa.Integer(), nullable=True),
        sa.Column("model_version_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["model_version_id"], ["model_versions.id"], name=op.f("fk_prompts_model_version_id_model_versions")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_prompts")),
        sa.UniqueConstraint("content_hash", name=op.f("uq_prompts_content_hash")),
    )
    op.create_table(
        "candidates",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("prompt_id", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=300), nullable=True),
        sa.Column("model_version_id", sa.Integer(), nullable=True),
        sa.Column("sampling", sa.JSON(), nullable=True),
        sa.Column("iteration", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["model_version_id"], ["model_versions.id"], name=op.f("fk_candidates_model_version_id_model_versions")
        ),
        sa.ForeignKeyConstraint(
            ["prompt_id"], ["prompts.id"], name=op.f("fk_candidates_prompt_id_prompts"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_candidates")),
        sa.UniqueConstraint("prompt_id", "content_hash", name=op.f("uq_candidates_prompt_id_content_hash")),
    )
    with op.batch_alter_table("candidates", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_candidates_prompt_id"), ["prompt_id"], unique=False)

    op.create_table(
        "ls_tasks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("prompt_id", sa.Integer(), nullable=False),
        sa.Column("candidate_set_hash", sa.String(length=64), nullable=False),
        sa.Column("shown_order", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"], ["ls_projects.id"], name=op.f("fk_ls_tasks_project_id_ls_projects"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["prompt_id"], ["prompts.id"], name=op.f("fk_ls_tasks_prompt_id_prompts"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ls_tasks")),
        sa.UniqueConstraint(
            "project_id",
            "prompt_id",
            "candidate_set_hash",
            name=op.f("uq_ls_tasks_project_id_prompt_id_candidate_set_hash"),
        ),
        sa.UniqueConstraint("project_id", "task_id", name=op.f("uq_ls_tasks_project_id_task_id")),
    )
    op.create_table(
        "rankings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("prompt_id", sa.Integer(), nullable=False),
        sa.Column("annotator_id", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=20), nullable=False),
        sa.Column("external_id", sa.String(length=200), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=12), nullable=False),
        sa.Column("n_tiers", sa.Integer(), nullable=False),
        sa.Column("same_as_shown", sa.Boolean(), nullable=False),
        sa.Column("raw_record_id", sa.Integer(), nullable=True),
        sa.Column("ls_project_id", sa.Integer(), nullable=True),
        sa.Column("ls_task_id", sa.Integer(), nullable=True),
        sa.Column("ls_annotation_id", sa.Integer(), nullable=True),
        sa.Column("judge_run", sa.String(length=100), nullable=True),
        sa.Column("iteration", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["annotator_id"], ["annotators.id"], name=op.f("fk_rankings_annotator_id_annotators")),
        sa.ForeignKeyConstraint(
            ["prompt_id"], ["prompts.id"], name=op.f("fk_rankings_prompt_id_prompts"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["raw_record_id"], ["raw_records.id"], name=op.f("fk_rankings_raw_record_id_raw_records")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rankings")),
        sa.UniqueConstraint(
            "external_id",
            "annotator_id",
            "source",
            "version",
            name=op.f("uq_rankings_external_id_annotator_id_source_version"),
        ),
    )
    with op.batch_alter_table("rankings", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_rankings_annotator_id"), ["annotator_id"], unique=False)
        batch_op.create_index("ix_rankings_prompt_status", ["prompt_id", "status"], unique=False)
        batch_op.create_index("ix_rankings_ls_annotation", ["ls_project_id", "ls_annotation_id"], unique=False)

    op.create_table(
        "training_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=30), nullable=False),
        sa.Column("status", sa.String(length=12), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("dataset_version_id", sa.Integer(), nullable=True),
        sa.Column("base_model", sa.String(length=1000), nullable=True),
        sa.Column("base_model_version_id", sa.Integer(), nullable=True),
        sa.Column("output_model_version_id", sa.Integer(), nullable=True),
        sa.Column("output_path", sa.String(length=1000), nullable=True),
        sa.Column("metrics", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("world_size", sa.Integer(), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["base_model_version_id"],
            ["model_versions.id"],
            name=op.f("fk_training_runs_base_model_version_id_model_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["dataset_version_id"],
            ["dataset_versions.id"],
            name=op.f("fk_training_runs_dataset_version_id_dataset_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["output_model_version_id"],
            ["model_versions.id"],
            name=op.f("fk_training_runs_output_model_version_id_model_versions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_training_runs")),
    )
    op.create_table(
        "self_reward_iterations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("loop", sa.String(length=100), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("step", sa.String(length=20), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("policy_id", sa.Integer(), nullable=False),
        sa.Column("model_version_id", sa.Integer(), nullable=True),
        sa.Column("judge_annotator_id", sa.Integer(), nullable=True),
        sa.Column("dataset_version_id", sa.Integer(), nullable=True),
        sa.Column("training_run_id", sa.Integer(), nullable=True),
        sa.Column("state", sa.JSON(), nullable=True),
        sa.Column("metrics", sa.JSON(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["dataset_version_id"],
            ["dataset_versions.id"],
            name=op.f("fk_self_reward_iterations_dataset_version_id_dataset_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["judge_annotator_id"],
            ["annotators.id"],
            name=op.f("fk_self_reward_iterations_judge_annotator_id_annotators"),
        ),
        sa.ForeignKeyConstraint(
            ["model_version_id"],
            ["model_versions.id"],
            name=op.f("fk_self_reward_iterations_model_version_id_model_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["policy_id"], ["model_versions.id"], name=op.f("fk_self_reward_iterations_policy_id_model_versions")
        ),
        sa.ForeignKeyConstraint(
            ["training_run_id"],
            ["training_runs.id"],
            name=op.f("fk_self_reward_iterations_training_run_id_training_runs"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_self_reward_iterations")),
        sa.UniqueConstraint("loop", "iteration", name=op.f("uq_self_reward_iterations_loop_iteration")),
    )
    op.create_table(
        "comparisons",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=False),
        sa.Column("prompt_id", sa.Integer(), nullable=False),
        sa.Column("chosen_id", sa.Integer(), nullable=False),
        sa.Column("rejected_id", sa.Integer(), nullable=False),
        sa.Column("ranking_id", sa.Integer(), nullable=True),
        sa.Column("annotator_kind", sa.String(length=10), nullable=False),
        sa.Column("margin", sa.Float(), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_comparisons")),
    )
    with op.batch_alter_table("comparisons", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_comparisons_build_id"), ["build_id"], unique=False)
        batch_op.create_index("ix_comparisons_prompt", ["prompt_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_comparisons_ranking_id"), ["ranking_id"], unique=False)

    op.create_table(
        "ranking_items",
        sa.Column("ranking_id", sa.Integer(), nullable=False),
        sa.Column("candidate_id", sa.Integer(), nullable=False),
        sa.Column("tier", sa.Integer(), nullable=True),
        sa.Column("shown_position", sa.Integer(), nullable=True),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("details", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["candidate_id"],
            ["candidates.id"],
            name=op.f("fk_ranking_items_candidate_id_candidates"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["ranking_id"], ["rankings.id"], name=op.f("fk_ranking_items_ranking_id_rankings"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("ranking_id", "candidate_id", name=op.f("pk_ranking_items")),
    )
    with op.batch_alter_table("ranking_items", schema=None) as batch_op:
        batch_op.create_index("ix_ranking_items_ranking_tier", ["ranking_id", "tier"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("ranking_items", schema=None) as batch_op:
        batch_op.drop_index("ix_ranking_items_ranking_tier")

    op.drop_table("ranking_items")
    with op.batch_alter_table("comparisons", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_comparisons_ranking_id"))
        batch_op.drop_index("ix_comparisons_prompt")
        batch_op.drop_index(batch_op.f("ix_comparisons_build_id"))

    op.drop_table("comparisons")
    op.drop_table("self_reward_iterations")
    op.drop_table("training_runs")
    with op.batch_alter_table("rankings", schema=None) as batch_op:
        batch_op.drop_index("ix_rankings_ls_annotation")
        batch_op.drop_index("ix_rankings_prompt_status")
        batch_op.drop_index(batch_op.f("ix_rankings_annotator_id"))

    op.drop_table("rankings")
    op.drop_table("ls_tasks")
    with op.batch_alter_table("candidates", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_candidates_prompt_id"))

    op.drop_table("candidates")
    op.drop_table("prompts")
    op.drop_table("dataset_versions")
    op.drop_table("raw_records")
    op.drop_table("pair_builds")
    op.drop_table("model_versions")
    op.drop_table("ls_projects")
    op.drop_table("job_locks")
    op.drop_table("annotators")
