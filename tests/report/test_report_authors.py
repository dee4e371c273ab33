"""The Data section counts each reply for the model that wrote it, named as the leaderboard names it (issue 46, 1i).

A reply's author is its ranking's to say (`ranking_items.model`), else its candidate's model version, else the
candidate's first writer: the same fall-back as the leaderboard's battles, so the report's "Candidates by model"
and its leaderboard never name one model two ways.
"""

from __future__ import annotations

from preflab.db.models import Candidate, ModelVersion, Prompt, Ranking, RankingItem
from preflab.report.data import data_section


def test_candidates_are_counted_by_author_as_the_leaderboard_names_them(sessions):
    from preflab.db.leaderboard.battles import Filters, read_battles

    with sessions.begin() as session:
        version = ModelVersion(name="policy-2", kind="policy")
        prompt = Prompt(text="Why?", content_hash="p", source="test")
        session.add_all([version, prompt])
        session.flush()
        # Written in process by a trained version from its folder; the same text later imported as gpt-4's.
        mine = Candidate(
            prompt_id=prompt.id,
            text="Because.",
            content_hash="a",
            model="/home/alice/runs/policy-2/merged",
            model_version_id=version.id,
        )
        theirs = Candidate(prompt_id=prompt.id, text="No idea.", content_hash="b", model="vicuna-13b")
        session.add_all([mine, theirs])
        session.flush()
        for n, (item_model, winner) in enumerate(((None, mine), ("gpt-4", theirs))):
            ranking = Ranking(prompt_id=prompt.id, annotator_id=1, source="test", external_id=str(n), n_tiers=2)
            session.add(ranking)
            session.flush()
            loser = theirs if winner is mine else mine
            session.add_all(
                [
                    RankingItem(ranking_id=ranking.id, candidate_id=winner.id, tier=0, shown_position=0),
                    RankingItem(
                        ranking_id=ranking.id,
                        candidate_id=loser.id,
                        tier=1,
                        shown_position=1,
                        model=item_model if loser is mine else None,
                    ),
                ]
            )
    with sessions.begin() as session:
        by_model = {row["name"]: row["count"] for row in data_section(session)["candidates_by_model"]}
        battles = read_battles(session, Filters())
    # "Because." is policy-2's (its version, not its folder) and, in the second ranking, gpt-4's as well.
    assert by_model == {"policy-2": 1, "gpt-4": 1, "vicuna-13b": 1}
    assert set(battles.models) == {"policy-2", "gpt-4", "vicuna-13b"}


def test_a_reply_of_identical_battles_counts_for_every_model_that_gave_it(sessions, tmp_path):
    """Arena's "hi" answered alike by ultra, tiny and mid in four battles: one reply, three authors (a new user
    found it counted for the first model of each battle only). The other three replies have one author each."""
    from tests.db.ingest.datasets.shapes_b import run_import, write_jsonl
    from tests.db.leaderboard.test_identical_battles import ROWS

    run_import(sessions, write_jsonl(tmp_path / "arena.jsonl", ROWS), "arena")
    with sessions.begin() as session:
        by_model = {row["name"]: row["count"] for row in data_section(session)["candidates_by_model"]}
    # the shared "Hello!" for each of ultra, tiny, mid; then "4, says ultra"/"Four."/"4, says tiny"/"4, says mid"
    # by the models that gave them in d1–d3 ("Four." is mid's in d1, tiny's in d2, ultra's in d3)
    assert by_model == {"ultra": 3, "mid": 3, "tiny": 3}
