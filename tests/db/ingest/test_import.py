"""`preflab import`: raw first, quarantine with reasons, idempotent, a transaction per batch."""

import json
from contextlib import contextmanager

import pytest
from sqlalchemy import func, select

from preflab.console import Reporter
from preflab.db.ingest.jsonl import import_file, import_rankings_batch
from preflab.db.models import Annotator, Candidate, Prompt, Ranking, RankingItem, RawRecord
from preflab.errors import EXIT_ALL_QUARANTINED
from tests.db.helpers import ranking_line, write_lines

GOOD = [
    ranking_line("What is 2+2?", ["4", "5", "22"], [[0], [2], [1]], "alice", id="r1"),
    ranking_line("What is 2+2?", ["4", "5", "22"], [[0], [1, 2]], "bob", id="r1"),
    ranking_line(
        "Capital of France?",
        ["Paris", "Lyon", "Nice", "Marseille"],
        [[0], [3]],
        "judge",
        "ai",
        id="j1",
        scores=[9.0, 1.0, None, 4.0],
        model="tiny",
    ),
]
BAD = {
    "not json": "not valid JSON",
    '["a list"]': "expected a JSON object",
    ranking_line("p", ["only one"], [[0]]): "fewer than two responses",
    ranking_line("p", ["a", "b"], [[0], [7]]): "index 7 out of range for 2 responses",
    ranking_line("p", ["a", "b"], [[0], [0, 1]]): "index 0 appears in tiers 0 and 1",
    ranking_line("p", ["a", "b"], [[0], [1]], kind="robot"): "unknown annotator_kind 'robot'",
    ranking_line("p", ["a", "a"], [[0], [1]]): "responses 0 and 1 are identical",
    ranking_line("p", ["a", "b"], []): "missing 'ranking'",
    json.dumps({"prompt": "p", "responses": ["a", "b"], "ranking": [[0], [1]]}): "missing 'annotator'",
    ranking_line("p", ["a", "b"], [[0], [1]], scores=[1]): "'scores' must be a list of 2 numbers",
}


def count(session, model):
    return session.scalar(select(func.count()).select_from(model))


def test_import_stores_prompts_candidates_rankings(cli, sessions, tmp_path):
    path = write_lines(tmp_path / "r.jsonl", GOOD)
    out = json.loads(cli("import", "rankings", path, "--json").stdout)
    assert out == {
        "read": 3,
        "imported": 3,
        "duplicates": 0,
        "quarantined": 0,
        "blank": 0,
        "new_prompts": 2,
        "new_candidates": 7,
        "retried": 0,
        "reasons": {},
    }
    with sessions.begin() as s:
        assert count(s, Prompt) == 2 and count(s, Candidate) == 7 and count(s, Ranking) == 3
        assert count(s, RawRecord) == 3
        alice = s.scalar(select(Ranking).join(Ranking.annotator).where(Annotator.name == "alice"))
        texts = {c.id: c.text for c in s.scalars(select(Candidate))}
        assert [[texts[c] for c in tier] for tier in alice.tiers()] == [["4"], ["22"], ["5"]]
        assert [texts[c] for c in alice.shown_order()] == ["4", "5", "22"]
        judge = s.scalar(select(Ranking).join(Ranking.annotator).where(Annotator.kind == "ai"))
        items = {texts[i.candidate_id]: (i.tier, i.score) for i in judge.items}
        assert items == {"Paris": (0, 9.0), "Lyon": (None, 1.0), "Nice": (None, None), "Marseille": (1, 4.0)}
        assert s.scalar(select(Candidate.model).where(Candidate.text == "Paris")) == "tiny"


def test_reimport_and_overlap_add_nothing_twice(cli, sessions, tmp_path):
    first = write_lines(tmp_path / "a.jsonl", GOOD[:2])
    overlap = write_lines(tmp_path / "b.jsonl", GOOD[1:])
    cli("import", "rankings", first)
    again = json.loads(cli("import", "rankings", first, "--json").stdout)
    assert again["imported"] == 0 and again["duplicates"] == 2
    out = json.loads(cli("import", "rankings", overlap, "--json").stdout)
    assert out["imported"] == 1 and out["duplicates"] == 1
    with sessions.begin() as s:
        assert count(s, Ranking) == 3 and count(s, Prompt) == 2 and count(s, RankingItem) == 10
        assert count(s, RawRecord) == 3  # a line seen again is not stored again


def test_a_bad_line_met_twice_is_quarantined_once_and_counted_a_duplicate(cli, sessions, tmp_path):
    bad = ranking_line("p", ["only one"], [[0]])
    path = write_lines(tmp_path / "r.jsonl", [GOOD[0], bad, bad])
    out = json.loads(cli("import", "rankings", path, "--json", expect_ok=False).stdout)
    assert (out["quarantined"], out["duplicates"], out["imported"]) == (1, 1, 1)
    listed = cli("quarantine", "list", "--json").stdout
    assert len(json.loads(listed)) == out["quarantined"]  # the summary says what `quarantine list` shows


def test_same_id_different_annotator_is_a_different_ranking(cli, sessions, tmp_path):
    path = write_lines(tmp_path / "r.jsonl", GOOD[:2])  # both have id r1
    cli("import", "rankings", path)
    with sessions.begin() as s:
        assert count(s, Ranking) == 2


def test_bad_lines_are_quarantined_with_reasons_and_the_rest_imports(cli, sessions, tmp_path):
    lines = [GOOD[0], *BAD, GOOD[2]]
    path = write_lines(tmp_path / "r.jsonl", lines)
    out = json.loads(cli("import", "rankings", path, "--json").stdout)
    assert out["imported"] == 2 and out["quarantined"] == len(BAD)
    listed = cli("quarantine", "list").stdout.strip().splitlines()
    assert len(listed) == len(BAD)
    for _line, reason in BAD.items():
        assert any(reason in row for row in listed), reason
    with sessions.begin() as s:
        stored = set(s.scalars(select(RawRecord.payload)))
        assert set(BAD) <= stored  # kept exactly as received
        reasons = set(s.scalars(select(RawRecord.reason).where(RawRecord.status == "quarantined")))
        assert len(reasons) == len(BAD)
    again = json.loads(cli("import", "rankings", path, "--json").stdout)
    assert again["imported"] == 0 and again["quarantined"] == len(BAD)
    with sessions.begin() as s:
        assert count(s, RawRecord) == len(lines)


def test_missing_file_is_one_sentence(cli, tmp_path):
    result = cli("import", "rankings", tmp_path / "nope.jsonl", expect_ok=False)
    assert result.exit_code == 1
    assert result.output.strip() == f"Error: {tmp_path / 'nope.jsonl'} is not a file"


def test_crash_half_way_keeps_whole_batches_and_rerun_completes(sessions, tmp_path):
    lines = [ranking_line(f"prompt {i}", [f"a{i}", f"b{i}", f"c{i}"], [[0], [1], [2]], id=f"r{i}") for i in range(10)]
    path = write_lines(tmp_path / "r.jsonl", lines)

    class CrashAfterTwoBatches(Reporter):
        @contextmanager
        def progress(self, description, total=None):
            calls = []

            def advance(n):
                calls.append(n)
                if len(calls) == 2:
                    raise KeyboardInterrupt

            yield advance

    with pytest.raises(KeyboardInterrupt):
        import_file(sessions, path, import_rankings_batch, reporter=CrashAfterTwoBatches(), batch_lines=3)
    with sessions.begin() as s:
        assert count(s, Ranking) == 6 and count(s, RankingItem) == 18 and count(s, Prompt) == 6
    summary = import_file(sessions, path, import_rankings_batch, batch_lines=3)
    assert summary.imported == 4 and summary.duplicates == 6
    with sessions.begin() as s:
        assert count(s, Ranking) == 10 and count(s, RankingItem) == 30


def test_import_prompts_with_and_without_responses(cli, sessions, tmp_path):
    path = write_lines(
        tmp_path / "p.jsonl",
        [
            json.dumps({"prompt": "Name a colour.", "reference": "Red."}),
            json.dumps({"prompt": "Say hi.", "responses": ["hi", "hello"]}),
            json.dumps({"prompt": ""}),
        ],
    )
    out = json.loads(cli("import", "prompts", path, "--json").stdout)
    assert out["imported"] == 2 and out["quarantined"] == 1
    with sessions.begin() as s:
        assert s.scalar(select(Prompt.reference).where(Prompt.text == "Name a colour.")) == "Red."
        assert count(s, Candidate) == 2 and count(s, Ranking) == 0
    # a later ranking of the same prompt reuses the prompt and its candidates
    cli("import", "rankings", write_lines(tmp_path / "r.jsonl", [ranking_line("Say hi.", ["hello", "hi"], [[0], [1]])]))
    with sessions.begin() as s:
        assert count(s, Prompt) == 2 and count(s, Candidate) == 2


def test_sample_rankings_import_cleanly(cli, sample_rankings):
    out = json.loads(cli("import", "rankings", sample_rankings, "--json").stdout)
    assert out["quarantined"] == 0 and out["imported"] == out["read"] > 50


def test_bulk_rows_round_trip_json_and_timestamps(sessions):
    """Rows written by the driver-level bulk path read back through the ORM unchanged."""
    from datetime import timezone

    from preflab.db.models import Annotator
    from preflab.db.store import ensure_annotators, ensure_candidates, ensure_prompts

    with sessions.begin() as s:
        pid = ensure_prompts(s, {"h" * 64: {"text": "P"}})["h" * 64]
        cid = ensure_candidates(s, {(pid, "c" * 64): {"text": "C", "sampling": {"temperature": 0.7, "seed": 3}}})
        ensure_annotators(s, {("ai", "judge"): {"judge_kind": "score", "config": {"k": 3, "model": "m"}}})
    with sessions.begin() as s:
        candidate = s.get(Candidate, cid[(pid, "c" * 64)])
        assert candidate.sampling == {"temperature": 0.7, "seed": 3}
        judge = s.scalar(select(Annotator).where(Annotator.name == "judge"))
        assert judge.config == {"k": 3, "model": "m"}
        created = judge.created_at if judge.created_at.tzinfo else judge.created_at.replace(tzinfo=timezone.utc)
        assert created.year >= 2024 and created.second is not None
        assert s.get(Prompt, pid).created_at.hour == created.hour


@pytest.mark.parametrize("what, good", [("rankings", GOOD[0]), ("prompts", json.dumps({"prompt": "Say hi."}))])
def test_exit_status_3_when_every_record_is_quarantined_and_0_when_some_are(cli, tmp_path, what, good):
    assert f"{EXIT_ALL_QUARANTINED} when every record" in " ".join(cli("import", what, "--help").stdout.split())
    bad = write_lines(tmp_path / "bad.jsonl", ["not json", "", '{"prompt": 7}'])
    text = cli("import", what, bad, expect_ok=False)
    assert text.exit_code == EXIT_ALL_QUARANTINED and "Traceback" not in text.output
    assert text.stdout.startswith(f"read 3 lines: imported 0 {what}, 2 quarantined, 0 duplicates, 1 blank")
    as_json = cli("import", what, bad, "--json", expect_ok=False)  # again: the same status
    assert as_json.exit_code == EXIT_ALL_QUARANTINED
    summary = json.loads(as_json.stdout)
    assert (summary["read"], summary["imported"], summary["quarantined"], summary["blank"]) == (3, 0, 2, 1)
    mixed = write_lines(tmp_path / "mixed.jsonl", ["not json", good])
    assert json.loads(cli("import", what, mixed, "--json").stdout)["imported"] == 1  # exit 0
    assert json.loads(cli("import", what, mixed, "--json").stdout)["duplicates"] == 1  # exit 0: nothing new, not wrong
    assert cli("import", what, write_lines(tmp_path / "blank.jsonl", ["", "  "])).exit_code == 0  # no record read
