"""Each battle is credited to the models its own source row names, whatever another import stored first.

A candidate is stored once per prompt and text, so one reply can be two models' in two
Arena battles, or have been stored with no model by an HH-RLHF import; the ranking items
keep each ranking's authors. `--source` chooses rankings by their own source, and what a
filter leaves out is counted.
"""

import json

from sqlalchemy import func, select

from preflab.db.models import Candidate, Ranking, RankingItem, RawRecord
from tests.db.ingest.datasets.shapes_b import write_jsonl
from tests.db.ingest.datasets.test_arena import battle, bot, user
from tests.db.ingest.datasets.test_ultrafeedback import completion, row

HELLO = "Hello! How can I help you today?"


def hh(prompt: str, chosen: str, rejected: str) -> dict:
    """An Anthropic/hh-rlhf row: two whole transcripts."""
    return {
        "chosen": f"\n\nHuman: {prompt}\n\nAssistant: {chosen}",
        "rejected": f"\n\nHuman: {prompt}\n\nAssistant: {rejected}",
    }


def board(cli, *args) -> dict:
    """The board of the store's one criterion (--json keys a board by its criterion)."""
    (only,) = json.loads(cli("leaderboard", "--json", "--bootstrap", 20, *args).output).values()
    return only


def records(cli, tmp_path, name: str, fmt: str, rows: list[dict]) -> None:
    cli("import", "dataset", "--format", fmt, write_jsonl(tmp_path / f"{name}.jsonl", rows))


def credited(result: dict) -> dict[str, tuple[int, int, int]]:
    return {r["model"]: (r["wins"], r["ties"], r["losses"]) for r in result["ratings"]}


def test_one_reply_of_two_models_is_each_models_in_its_own_battle(cli, sessions, tmp_path):
    records(
        cli,
        tmp_path,
        "arena",
        "arena",
        [
            battle(
                "q1",
                "model_b",
                [user("Hi"), bot(HELLO)],
                [user("Hi"), bot("Hi there, what's up?")],
                models=("gpt-4", "vicuna-13b"),
            ),
            battle(
                "q2",
                "model_b",
                [user("Hi"), bot(HELLO)],
                [user("Hi"), bot("Hey! Ask me anything.")],
                models=("claude-v1", "koala-13b"),
            ),
            battle(
                "q3",
                "model_a",
                [user("Hi"), bot("Hi there, what's up?")],
                [user("Hi"), bot(HELLO)],
                models=("vicuna-13b", "claude-v1"),
            ),
        ],
    )
    with sessions.begin() as session:
        # still one candidate for the shared reply; its authors are kept per ranking
        assert session.scalar(select(func.count()).select_from(Candidate).where(Candidate.text == HELLO)) == 1
        authors = session.execute(
            select(Ranking.external_id, RankingItem.model)
            .join(RankingItem, RankingItem.ranking_id == Ranking.id)
            .join(Candidate, Candidate.id == RankingItem.candidate_id)
            .where(Candidate.text == HELLO)
            .order_by(Ranking.external_id)
        ).all()
    assert authors == [("q1", "gpt-4"), ("q2", "claude-v1"), ("q3", "claude-v1")]
    result = board(cli)
    assert credited(result) == {
        "gpt-4": (0, 0, 1),
        "vicuna-13b": (2, 0, 0),
        "claude-v1": (0, 0, 2),
        "koala-13b": (1, 0, 0),
    }
    assert result["battles"] == 3 and result["left_out"] == {}


def test_replies_an_hh_import_stored_without_a_model_are_credited_to_the_models_that_wrote_them(
    cli, sessions, tmp_path
):
    records(cli, tmp_path, "hh", "hh-rlhf", [hh("Hi", HELLO, "Go away."), hh("Name a colour.", "Blue.", "Seven.")])
    records(
        cli,
        tmp_path,
        "arena",
        "arena",
        [
            battle(
                "q1", "model_a", [user("Hi"), bot(HELLO)], [user("Hi"), bot("Go away.")], models=("gpt-4", "claude-v1")
            )
        ],
    )
    records(
        cli,
        tmp_path,
        "ultrafeedback",
        "ultrafeedback",
        [
            row(
                "Hi",
                completion("gpt-4", HELLO, 8.0),
                completion("alpaca-7b", "Hi.", 5.0),
                completion("bard", "Go away.", 2.0),
            ),
            row("Name a colour.", completion("llama-2-7b-chat", "Blue.", 9.0), completion("bard", "Seven.", 1.0)),
        ],
    )
    with sessions.begin() as session:
        models = dict(session.execute(select(Candidate.text, Candidate.model)).all())
    assert models[HELLO] is None and models["Go away."] is None and models["Blue."] is None  # HH's, kept

    result = board(cli, "--criterion", "overall")  # UltraFeedback's aspects are boards of their own
    assert credited(result) == {
        "gpt-4": (3, 0, 0),
        "claude-v1": (0, 0, 1),
        "alpaca-7b": (1, 0, 1),
        "bard": (0, 0, 3),
        "llama-2-7b-chat": (1, 0, 0),
    }
    assert result["battles"] == 1 + 3 + 1
    assert result["left_out"] == {"a candidate of no known model": 2}  # HH names no model
    text = cli("leaderboard", "--bootstrap", 0).output
    assert all(f"  {model} " in text for model in credited(result))


def test_source_chooses_rankings_by_their_own_source_and_counts_what_it_leaves_out(cli, sessions, tmp_path):
    # HH stores two prompts first; Arena then ranks replies to them and to two prompts of its own
    records(
        cli,
        tmp_path,
        "hh",
        "hh-rlhf",
        [hh("Hi", "Hello.", "Go away."), hh("2+2?", "4", "5"), hh("Name a colour.", "Blue.", "Seven.")],
    )
    records(
        cli,
        tmp_path,
        "arena",
        "arena",
        [
            battle(
                "q1", "model_a", [user("Hi"), bot("Hello.")], [user("Hi"), bot("Yo.")], models=("gpt-4", "claude-v1")
            ),
            battle("q2", "tie", [user("2+2?"), bot("4")], [user("2+2?"), bot("Four.")], models=("claude-v1", "gpt-4")),
            battle(
                "q3",
                "model_b",
                [user("Capital of France?"), bot("Lyon")],
                [user("Capital of France?"), bot("Paris")],
                models=("gpt-4", "claude-v1"),
            ),
            battle(
                "q4",
                "model_a",
                [user("Say hi"), bot("Hi!")],
                [user("Say hi"), bot("No.")],
                models=("claude-v1", "gpt-4"),
            ),
        ],
    )
    with sessions.begin() as session:
        sources = session.execute(
            select(Ranking.source, RawRecord.source, func.count())
            .join(RawRecord, RawRecord.id == Ranking.raw_record_id)
            .group_by(Ranking.source, RawRecord.source)
            .order_by(Ranking.source)
        ).all()
    assert sources == [("import:arena", "import:arena", 4), ("import:hh-rlhf", "import:hh-rlhf", 3)]

    arena = board(cli, "--source", "import:arena")
    assert arena["battles"] == arena["rankings"] == 4  # none vanished with the prompts HH stored first
    assert credited(arena) == {"gpt-4": (1, 1, 2), "claude-v1": (2, 1, 1)}
    assert arena["left_out"] == {"rankings whose source is not import:arena (--source)": 3}
    text = cli("leaderboard", "--source", "import:arena", "--bootstrap", 0).output
    assert text.splitlines()[0] == "2 models, 4 battles from 4 rankings by all annotators (source import:arena)"
    assert "left out 3 battles: rankings whose source is not import:arena (--source)" in text

    everything = board(cli)
    assert everything["battles"] == 4 and everything["left_out"] == {"a candidate of no known model": 3}
    hh_only = cli("leaderboard", "--source", "import:hh-rlhf", expect_ok=False)
    assert hh_only.exit_code == 1 and hh_only.output == (
        "Error: no ranking compares candidates of two different models (with source import:hh-rlhf) "
        "(4 left out: rankings whose source is not import:hh-rlhf (--source); "
        "3 left out: a candidate of no known model)\n"
    )


def test_the_report_counts_each_reply_for_the_models_that_wrote_it_and_labels_groups(cli, sessions, tmp_path):
    from preflab.report.build import build_report
    from preflab.report.render import render_html

    records(
        cli,
        tmp_path,
        "arena",
        "arena",
        [
            battle(
                "q1",
                "model_b",
                [user("Hi"), bot(HELLO)],
                [user("Hi"), bot("Hi there, what's up?")],
                models=("gpt-4", "vicuna-13b"),
            ),
            battle(
                "q2",
                "model_a",
                [user("Hi"), bot(HELLO)],
                [user("Hi"), bot("Hey! Ask me anything.")],
                models=("claude-v1", "koala-13b"),
            ),
        ],
    )
    with sessions.begin() as session:
        report = build_report(session, no_text=True)
    by_model = {row["name"]: row["count"] for row in report["data"]["candidates_by_model"]}
    assert by_model == {"gpt-4": 1, "claude-v1": 1, "vicuna-13b": 1, "koala-13b": 1}  # HELLO is each one's
    # gpt-4 and vicuna never met claude-v1 and koala: two groups, each labelled on the page
    assert [r["group"] for r in report["leaderboard"]["ratings"]] == [1, 1, 2, 2]
    page = render_html(report)
    assert "group 1 of 2" in page and "group 2 of 2" in page and "listed group by group" in page
