"""Rankings in the store → battles between models: ties kept, models named, filters applied."""

from datetime import datetime, timezone

import numpy as np
import pytest
from sqlalchemy import select, update

from preflab.db.leaderboard.battles import Filters, markdown_counts, read_battles, style_counts
from preflab.db.leaderboard.bootstrap import Cells, patterns
from preflab.db.models import Candidate, GoldAnswer, Prompt, Ranking
from tests.db.helpers import ranking_line
from tests.db.leaderboard.store import import_lines, simulated_store


def outcomes(battles) -> dict[tuple[str, str], list[float]]:
    """(winner-side model, other) -> outcomes, with each battle turned to read from its alphabetically first model."""
    out: dict[tuple[str, str], list[float]] = {}
    for a, b, o in zip(battles.a, battles.b, battles.outcome):
        x, y = battles.models[a], battles.models[b]
        key, value = ((x, y), o) if x < y else ((y, x), 1.0 - o)
        out.setdefault(key, []).append(float(value))
    return out


def test_a_ranking_is_every_pair_of_its_candidates_with_ties_as_ties(sessions, tmp_path):
    import_lines(
        sessions,
        tmp_path / "r.jsonl",
        [
            ranking_line("p1", ["a1", "b1", "c1", "d1"], [[1], [0, 2]], model=["x", "y", "z", "w"]),  # d1 not ranked
            ranking_line("p2", ["a2", "b2", "c2"], [[2], [0], [1]], model=["x", "y", "x"], annotator="bo"),
            ranking_line("p3", ["a3", "b3"], [[0], [1]], model=["x", None], annotator="cy"),
        ],
    )
    with sessions.begin() as session:
        battles = read_battles(session, Filters())
    assert outcomes(battles) == {("x", "y"): [0.0, 1.0, 1.0], ("x", "z"): [0.5], ("y", "z"): [1.0]}
    assert battles.rankings == 2
    assert battles.left_out == {"a candidate of no known model": 1, "both candidates of one model": 1}


def test_a_candidate_of_a_model_version_is_named_by_the_version(sessions, tmp_path):
    simulated_store(sessions, tmp_path / "r.jsonl", prompts=10)
    with sessions.begin() as session:
        battles = read_battles(session, Filters())
        assert set(battles.models) == {"base", "policy-v1", "policy-v2", "policy-v3"}
        assert {m for (m,) in session.execute(select(Candidate.model).distinct())} == {
            "HuggingFaceTB/SmolLM2-135M-Instruct"
        }


def test_only_the_rankings_pairs_build_takes_count(sessions, tmp_path):
    import_lines(
        sessions,
        tmp_path / "r.jsonl",
        [ranking_line(f"p{k}", [f"a{k}", f"b{k}"], [[0], [1]], model=["x", "y"], id=str(k)) for k in range(4)],
    )
    with sessions.begin() as session:
        ids = session.scalars(select(Ranking.id).order_by(Ranking.id)).all()
        session.execute(update(Ranking).where(Ranking.id == ids[0]).values(status="superseded"))
        session.execute(update(Ranking).where(Ranking.id == ids[1]).values(status="skipped"))
        prompt = session.scalar(select(Ranking.prompt_id).where(Ranking.id == ids[2]))
        session.add(GoldAnswer(prompt_id=prompt, tiers=[[1], [0]]))
    with sessions.begin() as session:
        battles = read_battles(session, Filters())
    assert len(battles) == 1 and battles.rankings == 1


def test_filters_by_annotator_kind_time_source_and_split_and_count_what_they_leave_out(sessions, tmp_path):
    simulated_store(sessions, tmp_path / "r.jsonl", prompts=12)
    with sessions.begin() as session:
        everything = read_battles(session, Filters())
        assert len(everything) == 12 * 4 and everything.left_out == {}
        people = read_battles(session, Filters(annotator_kind="human"))
        judge = read_battles(session, Filters(annotator_kind="ai"))
        assert len(people) == len(judge) == 12 * 2
        assert people.left_out == {"rankings by AI judges (--annotator-kind human)": 12 * 2}
        assert judge.left_out == {"rankings by people (--annotator-kind ai)": 12 * 2}
        # the judge ranks every pair backwards
        assert sum(people.outcome) + sum(judge.outcome) == pytest.approx(len(people))
        arena = read_battles(session, Filters(source="import:arena"))
        assert len(arena) == 4 * 4
        assert arena.left_out == {"rankings whose source is not import:arena (--source)": 8 * 4}
        assert len(read_battles(session, Filters(source="import"))) == 8 * 4
        session.execute(update(Prompt).where(Prompt.text.in_(["question 0", "question 1"])).values(split="test"))
        test = read_battles(session, Filters(split="test"))
        assert len(test) == 2 * 4 and test.left_out == {"prompts not of split test (--prompts)": 10 * 4}
        both = read_battles(session, Filters(annotator_kind="human", split="test", source="import:arena"))
        assert len(both) == 1 * 2
        # each battle left out once, under the first filter that refused it
        assert both.left_out == {
            "rankings by AI judges (--annotator-kind human)": 12 * 2,
            "rankings whose source is not import:arena (--source)": 8 * 2,
            "prompts not of split test (--prompts)": 3 * 2,
        }
        old = datetime(2020, 1, 1, tzinfo=timezone.utc)
        first = session.scalars(select(Ranking.id).order_by(Ranking.id).limit(10)).all()
        session.execute(update(Ranking).where(Ranking.id.in_(first)).values(created_at=old))
        recent = read_battles(session, Filters(since=datetime(2021, 1, 1, 9, 30, tzinfo=timezone.utc)))
        assert len(recent) == 12 * 4 - 10
        assert recent.left_out == {"rankings stored before 2021-01-01 09:30 UTC (--since)": 10}
        assert len(read_battles(session, Filters(since=datetime(2019, 1, 1, tzinfo=timezone.utc)))) == 12 * 4
        nothing = read_battles(session, Filters(source="label-studio"))
        assert len(nothing) == 0 and nothing.left_out == {
            "rankings whose source is not label-studio (--source)": 12 * 4
        }


def test_a_ranking_of_several_replies_left_out_counts_all_its_battles(sessions, tmp_path):
    import_lines(
        sessions,
        tmp_path / "r.jsonl",
        [
            ranking_line("p1", ["a1", "b1", "c1", "d1"], [[1], [0, 2]], model=["x", "y", "z", "w"]),  # d1 not ranked
            ranking_line("p2", ["a2", "b2"], [[0], [1]], model=["x", "y"], annotator="bo"),
        ],
    )
    import_lines(
        sessions,
        tmp_path / "s.jsonl",
        [ranking_line("p3", ["a3", "b3"], [[0], [1]], model=["x", "y"])],
        source="import:arena",
    )
    with sessions.begin() as session:
        battles = read_battles(session, Filters(source="import:arena"))
    assert len(battles) == 1 and battles.left_out == {"rankings whose source is not import:arena (--source)": 3 + 1}


def test_the_bootstrap_draws_whole_rankings(sessions, tmp_path):
    """Rankings of three give three battles each: a pattern is a ranking's battles together.

    A battle's sides follow its replies' content hashes, so rankings alike in outcome may still differ in
    sides, and fall in different patterns: the draws are of rankings either way.
    """
    lines = [
        ranking_line(f"p{k}", [f"a{k}", f"b{k}", f"c{k}"], tiers, model=["x", "y", "z"], id=str(k))
        for k, tiers in enumerate([[[0], [1], [2]]] * 5 + [[[2], [0, 1]]] * 3 + [[[1], [0], [2]]])
    ]
    import_lines(sessions, tmp_path / "r.jsonl", lines)
    with sessions.begin() as session:
        battles = read_battles(session, Filters())
    cells = Cells(battles)
    counts, incidence = patterns(battles, cells)
    assert battles.models == ["x", "y", "z"] and counts.sum() == 9 and len(counts) >= 3
    assert (incidence.sum(axis=1) == 3).all()
    assert np.asarray(incidence.T @ counts).tolist() == np.bincount(cells.cell_of_battle).tolist()


def test_style_counts_are_fastchats_markdown_counts(sessions, tmp_path):
    reply = (
        "# Title\n## Part\nSome **bold** and __bold__ text.\n1. one\n2. two\n- dash\n* star\n"
        "```\n# not a header\n- not a list\n```\n#not a header either"
    )
    assert markdown_counts(reply) == (2, 4, 2)
    import_lines(sessions, tmp_path / "r.jsonl", [ranking_line("p", [reply, "plain"], [[0], [1]], model=["x", "y"])])
    with sessions.begin() as session:
        ids = session.scalars(select(Candidate.id).order_by(Candidate.id)).all()
        counts = style_counts(session, np.array(ids))
    assert counts.tolist() == [[len(reply), 2, 4, 2], [5, 0, 0, 0]]
