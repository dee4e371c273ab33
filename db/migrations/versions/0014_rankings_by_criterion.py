"""rankings name their criterion; PKU-SafeRLHF's, UltraFeedback's and hh-rlhf's verdicts move to criteria

A ranking now orders its replies by one criterion (`rankings.criterion`, `overall` where the source names
none), described in a new `criteria` table; the comparisons and the gold answers carry a criterion too, and
the unique keys of a ranking and of a gold answer take it (one annotation or dataset row may order the same
replies by several criteria, and a prompt may have a known order by each).
Every ranking stored before is `overall`, except those of datasets whose verdicts were stored as annotators
(or as files) because there were no criteria:

- PKU-SafeRLHF's `pku-saferlhf-better` and `pku-saferlhf-safer` become one annotator, `pku-saferlhf`, with
  the criteria `helpfulness` and `harmlessness` (the dataset's "better" is its helpfulness preference);
- UltraFeedback's `openbmb/UltraFeedback:<score field>` become `openbmb/UltraFeedback`, with the criterion
  the field names (`overall_score` is `overall`, `fine-grained_score` is `fine_grained`, an aspect its name);
- hh-rlhf's rankings imported from a file of one subset (its name or its folder's starting `helpful-` or
  `harmless-`, as `raw_records.origin` keeps it) take that subset's criterion, as the import gives it now.

A moved ranking keyed by what it means (`preflab.db.ingest.identity`) is re-keyed to what the import now
computes (the annotator's new name, and the criterion), so importing the same file again adds nothing. The
record of the move is kept: each moved ranking's details gain `renamed_from` (the annotator's old name and
the ranking's old external id), and each old annotator's config `merged_into` (the new name and criterion);
no annotator, ranking or raw record is deleted. Pairs of the moved rankings take their criterion, and the
next `pairs build` is a full one. `preflab db upgrade` prints how many rankings moved.

What the identity hashes is frozen here, as in 0013. SQLite rebuilds `rankings` for its new unique key: on
100,000 rankings, 10,000 of them moved, the migration took 1.1 s on SQLite and 1.5 s on Postgres (2 cores).
Downgrading moves the rankings back to their old annotators and ids, and refuses while the store holds
rankings of a criterion 0014 did not give them.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07
"""

import hashlib
import logging
import math
import secrets
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import PurePath

import orjson
import sqlalchemy as sa
from alembic import context, op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

log = logging.getLogger("preflab.db.migrations")
CHUNK = 2000
OVERALL = "overall"
OLD_KEY = ("external_id", "annotator_id", "source", "version")
NEW_KEY = (*OLD_KEY, "criterion")

ASPECTS = ("helpfulness", "honesty", "instruction_following", "truthfulness")
# hh-rlhf's subsets, by the start of their file's or folder's name (`preflab.db.ingest.datasets.hh`)
HH, HH_SUBSETS = "hh-rlhf", {"helpful-": "helpfulness", "harmless-": "harmlessness"}
# (kind, old name) -> (new name, criterion)
MOVES = {
    ("human", "pku-saferlhf-better"): ("pku-saferlhf", "helpfulness"),
    ("human", "pku-saferlhf-safer"): ("pku-saferlhf", "harmlessness"),
    ("ai", "openbmb/UltraFeedback:overall_score"): ("openbmb/UltraFeedback", OVERALL),
    ("ai", "openbmb/UltraFeedback:fine-grained_score"): ("openbmb/UltraFeedback", "fine_grained"),
    **{("ai", f"openbmb/UltraFeedback:{a}"): ("openbmb/UltraFeedback", a) for a in ASPECTS},
}

rankings = sa.table(
    "rankings",
    sa.column("id", sa.Integer),
    sa.column("prompt_id", sa.Integer),
    sa.column("annotator_id", sa.Integer),
    sa.column("source", sa.String),
    sa.column("external_id", sa.String),
    sa.column("criterion", sa.String),
    sa.column("raw_record_id", sa.Integer),
    sa.column("details", sa.JSON(none_as_null=True)),
    sa.column("updated_at", sa.DateTime(timezone=True)),
)
items = sa.table(
    "ranking_items",
    sa.column("ranking_id", sa.Integer),
    sa.column("candidate_id", sa.Integer),
    sa.column("tier", sa.Integer),
    sa.column("score", sa.Float),
    sa.column("model", sa.String),
)
candidates = sa.table(
    "candidates", sa.column("id", sa.Integer), sa.column("content_hash", sa.String), sa.column("model", sa.String)
)
prompts = sa.table("prompts", sa.column("id", sa.Integer), sa.column("content_hash", sa.String))
annotators = sa.table(
    "annotators",
    sa.column("id", sa.Integer),
    sa.column("kind", sa.String),
    sa.column("name", sa.String),
    sa.column("pseudonym", sa.String),
    sa.column("judge_kind", sa.String),
    sa.column("config", sa.JSON),
    sa.column("created_at", sa.DateTime(timezone=True)),
)
raw_records = sa.table(
    "raw_records", sa.column("id", sa.Integer), sa.column("source", sa.String), sa.column("origin", sa.String)
)
comparisons = sa.table("comparisons", sa.column("ranking_id", sa.Integer), sa.column("criterion", sa.String))
pair_builds = sa.table("pair_builds", sa.column("id", sa.Integer), sa.column("mode", sa.String))
criteria = sa.table(
    "criteria",
    sa.column("name", sa.String),
    sa.column("description", sa.Text),
    sa.column("created_at", sa.DateTime(timezone=True)),
)
DESCRIPTIONS = {  # what the moved rankings' criteria meant in their datasets
    OVERALL: "The one order asked for: which reply is better overall.",
    "helpfulness": "Which reply helps the user more: it does what was asked, correctly and usefully.",
    "harmlessness": "Which reply is safer: less likely to cause or assist harm.",
    "honesty": "Which reply is more honest: it says what it knows and where it is unsure.",
    "instruction_following": "Which reply follows the instruction more closely, in intent and in its constraints.",
    "truthfulness": "Which reply holds fewer false or made-up facts.",
    "fine_grained": "UltraFeedback's fine-grained score: the mean of its four aspect ratings.",
}


# --- the identity, as preflab.db.ingest.identity computes it at this revision ----------------------


def _canonical(value):
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return None
        return int(value) if value.is_integer() else value
    if isinstance(value, dict):
        out = {str(k): _canonical(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def _json(value) -> bytes:
    return orjson.dumps(_canonical(value), option=orjson.OPT_SORT_KEYS)


def _content_identity(fmt, kind, annotator, prompt, replies, details, criterion=OVERALL) -> str:
    body = {
        "format": fmt,
        "annotator": [kind, annotator],
        "prompt": prompt,
        "replies": sorted(([h, m, t, s] for h, m, t, s in replies), key=_json),
        "details": details,
    }
    if criterion != OVERALL:
        body["criterion"] = criterion
    return hashlib.sha256(_json(body)).hexdigest()


# --- the schema -------------------------------------------------------------------------------------


def _swap_key(old: tuple[str, ...], new: tuple[str, ...], add_column: bool) -> None:
    """The rankings' unique key from `old`'s columns to `new`'s (SQLite rebuilds the table)."""
    name = "uq_rankings_{}".format
    with op.batch_alter_table("rankings", recreate="auto") as batch:
        if add_column:
            batch.add_column(sa.Column("criterion", sa.String(40), nullable=False, server_default=OVERALL))
        batch.drop_constraint(name("_".join(old)), type_="unique")
        batch.create_unique_constraint(name("_".join(new)), list(new))
        if not add_column:
            batch.drop_column("criterion")


def upgrade() -> None:
    op.create_table(
        "criteria",
        sa.Column("name", sa.String(40), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_criteria")),
    )
    _swap_key(OLD_KEY, NEW_KEY, add_column=True)
    op.add_column("comparisons", sa.Column("criterion", sa.String(40), nullable=False, server_default=OVERALL))
    with op.batch_alter_table("gold_answers") as batch:  # a known order per prompt and criterion
        batch.add_column(sa.Column("criterion", sa.String(40), nullable=False, server_default=OVERALL))
        batch.drop_constraint("uq_gold_answers_prompt_id", type_="unique")
        batch.create_unique_constraint("uq_gold_answers_prompt_id_criterion", ["prompt_id", "criterion"])
    bind = op.get_bind()
    moved = _move(bind)
    used = {row[0] for row in bind.execute(sa.select(rankings.c.criterion).distinct())} | {OVERALL}
    now = datetime.now(timezone.utc)
    bind.execute(
        criteria.insert(), [{"name": c, "description": DESCRIPTIONS.get(c), "created_at": now} for c in sorted(used)]
    )
    if not moved:
        return
    line = (
        f"rankings name their criterion now: {sum(moved.values()):,} of PKU-SafeRLHF, UltraFeedback and hh-rlhf's "
        f"subsets moved from an annotator per verdict (a file per subset) to one annotator per dataset with a "
        f"criterion per verdict "
        f"({', '.join(f'{c} {n:,}' for c, n in sorted(moved.items()))}); the next pairs build is a full one"
    )
    log.info(line)
    notes = context.config.attributes.get("notes")
    if notes is not None:
        notes.append(line)


def _annotator(bind, kind: str, name: str) -> int:
    """The id of annotator (kind, name), created if it is not there."""
    found = bind.scalar(sa.select(annotators.c.id).where(annotators.c.kind == kind, annotators.c.name == name))
    if found is not None:
        return found
    bind.execute(
        annotators.insert().values(
            kind=kind,
            name=name,
            pseudonym=f"{kind}-{secrets.token_hex(6)}",
            judge_kind="import" if kind == "ai" else None,
            created_at=datetime.now(timezone.utc),
        )
    )
    return bind.scalar(sa.select(annotators.c.id).where(annotators.c.kind == kind, annotators.c.name == name))


def _move(bind) -> dict[str, int]:
    """Move MOVES' annotators' rankings, and hh-rlhf's of a named subset, to their criterion: criterion -> count."""
    moved: dict[str, int] = defaultdict(int)
    for (kind, old_name), (new_name, criterion) in MOVES.items():
        old_id = bind.scalar(sa.select(annotators.c.id).where(annotators.c.kind == kind, annotators.c.name == old_name))
        if old_id is None:
            continue
        new_id = _annotator(bind, kind, new_name)
        config = bind.scalar(sa.select(annotators.c.config).where(annotators.c.id == old_id)) or {}
        bind.execute(
            annotators.update()
            .where(annotators.c.id == old_id)
            .values(config={**config, "merged_into": {"name": new_name, "criterion": criterion}})
        )
        for criterion_of_row, count in _rekeyed(
            bind, old_id, (kind, old_name), (new_id, new_name), lambda _, to=criterion: to
        ):
            moved[criterion_of_row] += count
    hh = bind.scalar(sa.select(annotators.c.id).where(annotators.c.kind == "human", annotators.c.name == HH))
    if hh is not None:  # the annotator stays; the criterion is the subset its file came from, where it says one
        for criterion, count in _rekeyed(bind, hh, ("human", HH), (hh, HH), _hh_subset):
            moved[criterion] += count
    if moved:  # aggregated pairs may have combined two verdicts: the next build rewrites everything
        bind.execute(pair_builds.update().values(mode=None))
    return moved


def _hh_subset(origin: str | None) -> str | None:
    """The criterion of an hh-rlhf file from its name or its folder's (`harmless-base/train.jsonl.gz`), or None."""
    if not origin:
        return None
    path = PurePath(origin)
    for name in (path.name, path.parent.name):
        for prefix, criterion in HH_SUBSETS.items():
            if name.lower().startswith(prefix):
                return criterion
    return None


def _rekeyed(bind, old_id: int, old: tuple[str, str], new: tuple[int, str], criterion_of) -> list[tuple[str, int]]:
    """Move annotator `old_id`'s rankings to annotator `new` and the criterion `criterion_of(raw origin)` gives
    (None: left alone), re-keying those keyed by what they mean; returns (criterion, rankings moved) per chunk."""
    (kind, old_name), (new_id, new_name) = old, new
    now = datetime.now(timezone.utc)
    out, last = [], 0
    while True:
        rows = bind.execute(
            sa.select(
                rankings.c.id,
                rankings.c.external_id,
                rankings.c.prompt_id,
                rankings.c.details,
                raw_records.c.source,
                raw_records.c.origin,
            )
            .outerjoin(raw_records, raw_records.c.id == rankings.c.raw_record_id)
            .where(rankings.c.annotator_id == old_id, rankings.c.id > last, rankings.c.criterion == OVERALL)
            .order_by(rankings.c.id)
            .limit(CHUNK)
        ).all()
        if not rows:
            return out
        last = rows[-1][0]
        rows = [(*row, criterion_of(row[5])) for row in rows]
        rows = [row for row in rows if row[-1] is not None]
        if not rows:
            continue
        replies = _replies(bind, [r[0] for r in rows])
        hashes = dict(
            bind.execute(
                sa.select(prompts.c.id, prompts.c.content_hash).where(prompts.c.id.in_({r[2] for r in rows}))
            ).all()
        )
        updates = []
        for rid, external_id, prompt_id, details, raw_source, _origin, criterion in rows:
            fmt = (raw_source or "").removeprefix("import:")
            new_external = external_id
            mine = replies[rid]
            if _content_identity(fmt, kind, old_name, hashes[prompt_id], mine, details) == external_id:
                new_external = _content_identity(fmt, kind, new_name, hashes[prompt_id], mine, details, criterion)
            renamed = {"annotator": old_name, "external_id": external_id}
            updates.append(
                {
                    "rid": rid,
                    "annotator_id": new_id,
                    "criterion": criterion,
                    "external_id": new_external,
                    "details": {**(details or {}), "renamed_from": renamed},
                    "updated_at": now,
                }
            )
        bind.execute(rankings.update().where(rankings.c.id == sa.bindparam("rid")), updates)
        for criterion in {u["criterion"] for u in updates}:
            ids = [u["rid"] for u in updates if u["criterion"] == criterion]
            bind.execute(comparisons.update().where(comparisons.c.ranking_id.in_(ids)), {"criterion": criterion})
            out.append((criterion, len(ids)))


def _replies(bind, ids: list[int]) -> dict[int, list[tuple]]:
    """ranking id -> (content hash, model, tier, score) of each reply, as 0013 read them."""
    found = defaultdict(list)
    for rid, chash, model, fallback, tier, score in bind.execute(
        sa.select(
            items.c.ranking_id,
            candidates.c.content_hash,
            items.c.model,
            candidates.c.model,
            items.c.tier,
            items.c.score,
        )
        .join(candidates, candidates.c.id == items.c.candidate_id)
        .where(items.c.ranking_id.in_(ids))
    ):
        found[rid].append((chash, model, fallback, tier, score))
    out = {}
    for rid, mine in found.items():
        named = any(model is not None for _, model, *_ in mine)
        out[rid] = [(h, model if named else fallback, tier, score) for h, model, fallback, tier, score in mine]
    return out


def downgrade() -> None:
    bind = op.get_bind()
    kinds = dict(bind.execute(sa.select(annotators.c.id, annotators.c.kind)).all())
    ids = {(k, n): i for i, k, n in bind.execute(sa.select(annotators.c.id, annotators.c.kind, annotators.c.name))}
    updates, refused = [], []
    for rid, annotator_id, criterion, details in bind.execute(
        sa.select(rankings.c.id, rankings.c.annotator_id, rankings.c.criterion, rankings.c.details)
    ):
        renamed = (details or {}).get("renamed_from") if isinstance(details, dict) else None
        if renamed is not None:
            updates.append(
                {
                    "rid": rid,
                    "annotator_id": ids[(kinds[annotator_id], renamed["annotator"])],
                    "external_id": renamed["external_id"],
                    "details": {k: v for k, v in details.items() if k != "renamed_from"} or None,
                }
            )
        elif criterion != OVERALL:
            refused.append((rid, criterion))
    gold = sa.table("gold_answers", sa.column("criterion", sa.String))
    if bind.scalar(sa.select(sa.func.count()).select_from(gold).where(gold.c.criterion != OVERALL)):
        raise RuntimeError(
            "a store below revision 0014 holds one gold answer per prompt, of no criterion, and this one holds gold "
            "answers by criterion: nothing was changed"
        )
    if refused:
        rid, criterion = refused[0]
        raise RuntimeError(
            f"a store below revision 0014 cannot hold rankings by a criterion other than overall, and this one holds "
            f"{len(refused):,} (ranking {rid}: {criterion!r}): nothing was changed"
        )
    if updates:
        bind.execute(rankings.update().where(rankings.c.id == sa.bindparam("rid")), updates)
    for aid, config in bind.execute(sa.select(annotators.c.id, annotators.c.config)).all():
        if isinstance(config, dict) and "merged_into" in config:
            rest = {k: v for k, v in config.items() if k != "merged_into"}
            bind.execute(annotators.update().where(annotators.c.id == aid).values(config=rest or None))
    op.drop_column("comparisons", "criterion")
    with op.batch_alter_table("gold_answers") as batch:
        batch.drop_constraint("uq_gold_answers_prompt_id_criterion", type_="unique")
        batch.create_unique_constraint("uq_gold_answers_prompt_id", ["prompt_id"])
        batch.drop_column("criterion")
    _swap_key(NEW_KEY, OLD_KEY, add_column=False)
    op.drop_table("criteria")
