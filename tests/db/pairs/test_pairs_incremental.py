"""Incremental pair builds: only changed rankings are rewritten, and the result is a full rebuild's, row for row."""

import json
import random

import pytest
from sqlalchemy import select, update

from preflab.db.ingest.jsonl import import_file, import_rankings_batch
from preflab.db.models import Annotator, Comparison, GoldAnswer, PairBuild, Ranking, RankingStatus
from preflab.db.pairs.build import build_pairs
from preflab.errors import InputError
from tests.db.helpers import ranking_line, write_lines


def rankings(seed: int, n: int, prompts: range) -> list[str]:
    """n random rankings (ties, unranked items, some judges with scores) over `prompts`."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        p = rng.choice(prompts)
        k = 3 + p % 4
        order = rng.sample(range(k), k)
        ranked, tiers = order[: rng.randint(2, k)], []
        while ranked:
            size = 2 if len(ranked) > 2 and rng.random() < 0.3 else 1
            tiers.append(ranked[:size])
            ranked = ranked[size:]
        judge = rng.random() < 0.25
        extra = {"scores": [round(rng.random(), 3) for _ in range(k)]} if judge else {}
        lines.append(
            ranking_line(
                f"prompt {p}",
                [f"answer {p}.{j}" for j in range(k)],
                tiers,
                "judge" if judge else f"annotator-{rng.randint(0, 3)}",
                "ai" if judge else "human",
                id=f"{seed}-{i}",
                **extra,
            )
        )
    return lines


def load(sessions, tmp_path, name: str, lines: list[str]) -> None:
    import_file(sessions, write_lines(tmp_path / name, lines), import_rankings_batch)


def snapshot(session) -> list[tuple]:
    """The comparisons in build order (the order an export writes them), without their surrogate ids."""
    return [
        tuple(row)
        for row in session.execute(
            select(
                Comparison.prompt_id,
                Comparison.chosen_id,
                Comparison.rejected_id,
                Comparison.ranking_id,
                Comparison.annotator_kind,
                Comparison.margin,
                Comparison.weight,
            ).order_by(Comparison.id)
        )
    ]


def build(sessions, **settings):
    with sessions.begin() as session:
        summary = build_pairs(session, **settings)
        return summary, snapshot(session)


def change_the_store(sessions, tmp_path) -> int:
    """New rankings on old and new prompts, superseded and deleted ones, an old one valid again, a gold prompt."""
    load(sessions, tmp_path, "more.jsonl", rankings(2, 40, range(40)))
    with sessions.begin() as s:
        ids = s.scalars(select(Ranking.id).order_by(Ranking.id)).all()
        s.execute(update(Ranking).where(Ranking.id.in_(ids[5:8])).values(status=RankingStatus.superseded.value))
        s.execute(update(Ranking).where(Ranking.id.in_(ids[20:22])).values(status=RankingStatus.deleted.value))
        s.execute(update(Ranking).where(Ranking.id == ids[3]).values(status=RankingStatus.skipped.value))
        gold = s.scalar(select(Ranking.prompt_id).where(Ranking.id == ids[30]))
        s.add(GoldAnswer(prompt_id=gold, tiers=[]))
    return gold


SETTINGS = [
    ("all", "none", "any"),
    ("adjacent", "none", "human"),
    ("best-vs-rest", "none", "any"),
    ("best-vs-worst", "none", "ai"),
    ("all", "majority", "any"),
    ("all", "borda", "human"),
    ("adjacent", "bradley-terry", "any"),
]


@pytest.mark.parametrize("strategy,aggregate,kind", SETTINGS)
def test_incremental_build_equals_a_full_rebuild(sessions, tmp_path, strategy, aggregate, kind):
    settings = {"strategy": strategy, "aggregate": aggregate, "annotator_kind": kind}
    load(sessions, tmp_path, "first.jsonl", rankings(1, 80, range(30)))
    first, _ = build(sessions, **settings)
    assert first.mode == "full" and first.pairs > 0
    gold = change_the_store(sessions, tmp_path)

    incremental, rows = build(sessions, **settings)
    assert incremental.mode == "incremental" and 0 < incremental.changed < 80
    again, same_rows = build(sessions, **settings)  # nothing changed since
    full, full_rows = build(sessions, full=True, **settings)
    assert full.mode == "full"
    assert rows == full_rows == same_rows and rows
    assert (incremental.pairs, incremental.rankings) == (full.pairs, full.rankings) == (len(rows), again.rankings)
    assert again.changed == 0
    assert gold not in {row[0] for row in rows}  # gold prompts never become pairs


def test_a_ranking_valid_again_keeps_build_order(sessions, tmp_path):
    load(sessions, tmp_path, "first.jsonl", rankings(1, 60, range(20)))
    with sessions.begin() as s:
        old = s.scalars(select(Ranking.id).order_by(Ranking.id)).all()[10]
        s.execute(update(Ranking).where(Ranking.id == old).values(status=RankingStatus.deleted.value))
    build(sessions)
    with sessions.begin() as s:
        s.execute(update(Ranking).where(Ranking.id == old).values(status=RankingStatus.valid.value))
    incremental, rows = build(sessions)
    _, full_rows = build(sessions, full=True)
    assert incremental.changed == 1 and rows == full_rows
    assert old in {row[3] for row in rows}


def test_only_the_changed_rankings_are_rewritten(sessions, tmp_path):
    load(sessions, tmp_path, "first.jsonl", rankings(1, 60, range(20)))
    first, _ = build(sessions)
    load(sessions, tmp_path, "more.jsonl", rankings(3, 5, range(100, 103)))
    second, _ = build(sessions)
    with sessions.begin() as s:
        by_build = dict(
            s.execute(
                select(Comparison.build_id, Comparison.ranking_id).group_by(Comparison.build_id, Comparison.ranking_id)
            ).all()
        )
        written = {
            rid for bid, rid in s.execute(select(Comparison.build_id, Comparison.ranking_id)) if bid == second.build_id
        }
        new = set(s.scalars(select(Ranking.id).order_by(Ranking.id.desc()).limit(5)))
        row = s.get(PairBuild, second.build_id)
        assert (row.mode, row.n_changed, row.n_pairs) == ("incremental", 5, second.pairs)
    assert written == new and first.build_id in set(by_build)
    assert second.changed == 5 and second.rankings == first.rankings + 5


def test_changed_settings_rebuild_in_full(sessions, tmp_path):
    load(sessions, tmp_path, "first.jsonl", rankings(1, 30, range(10)))
    assert build(sessions)[0].mode == "full"
    assert build(sessions)[0].mode == "incremental"
    assert build(sessions, strategy="adjacent")[0].mode == "full"
    assert build(sessions, strategy="adjacent", annotator_kind="human")[0].mode == "full"
    assert build(sessions, strategy="adjacent", annotator_kind="human", aggregate="borda")[0].mode == "full"
    with sessions.begin() as s:  # a build from before incremental builds (schema 0003) tracked nothing
        s.execute(update(PairBuild).values(mode=None))
    assert build(sessions, strategy="adjacent", annotator_kind="human", aggregate="borda")[0].mode == "full"


def test_excluded_annotators_are_left_out_and_recorded(sessions, tmp_path):
    load(sessions, tmp_path, "first.jsonl", rankings(1, 60, range(20)))
    with sessions.begin() as s:
        people = dict(s.execute(select(Annotator.name, Annotator.id)).all())
        pseudonym = s.scalar(select(Annotator.pseudonym).where(Annotator.name == "annotator-1"))
    left_out = {people["annotator-1"]: ["agreement 0.12 < 0.3", "failed 3 of 4 gold tasks"]}
    summary, rows = build(sessions, excluded=left_out)
    assert summary.mode == "full" and summary.excluded == {pseudonym: left_out[people["annotator-1"]]}
    with sessions.begin() as s:
        theirs = set(s.scalars(select(Ranking.id).where(Ranking.annotator_id == people["annotator-1"])))
        assert s.get(PairBuild, summary.build_id).excluded == summary.excluded
        assert "annotator-1" not in json.dumps(s.get(PairBuild, summary.build_id).excluded)
    assert theirs and not theirs & {row[3] for row in rows}
    same, same_rows = build(sessions, excluded={people["annotator-1"]: ["another reason"]})
    assert same.mode == "incremental" and same.changed == 0 and same_rows == rows
    back, back_rows = build(sessions)  # nobody excluded: a full rebuild puts their pairs back
    assert back.mode == "full" and theirs <= {row[3] for row in back_rows} and back.excluded is None
    with pytest.raises(InputError, match="no such annotator"):
        build(sessions, excluded={999_999: ["gone"]})


def test_cli_full_flag(cli, sessions, tmp_path):
    cli("import", "rankings", write_lines(tmp_path / "r.jsonl", rankings(1, 20, range(5))))
    assert json.loads(cli("pairs", "build", "--json").stdout)["mode"] == "full"
    out = cli("pairs", "build").stdout
    assert "0 rankings changed" in out
    assert json.loads(cli("pairs", "build", "--full", "--json").stdout)["mode"] == "full"
