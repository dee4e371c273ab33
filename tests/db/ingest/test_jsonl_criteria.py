"""`preflab import rankings`: a line's optional `criterion`, what its order is by (`overall` when it names none)."""

from __future__ import annotations

import json
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from preflab.db.ingest.jsonl import import_file, import_rankings_batch
from preflab.db.models import Criterion, Ranking, RawRecord, RawStatus
from tests.db.helpers import ranking_line, write_lines
from tests.db.ingest.law_rows import ranking_lines
from tests.db.ingest.law_store import emptied, jsonl, rankings
from tests.properties import examples

LINES = [
    ranking_line("2+2?", ["4", "5"], [[0], [1]], "alice", id="r1"),
    ranking_line("2+2?", ["4", "5"], [[0], [1]], "alice", id="r1", criterion="helpfulness"),
    ranking_line("2+2?", ["4", "5"], [[1], [0]], "alice", id="r1", criterion="harmlessness"),
    ranking_line("2+2?", ["4", "5"], [[0], [1]], "alice", criterion="honesty"),  # no id: its meaning
]
BAD = {
    ranking_line("p", ["a", "b"], [[0], [1]], criterion="Helpful"): "'criterion' must be a criterion's short name",
    ranking_line("p", ["a", "b"], [[0], [1]], criterion=7): "'criterion' must be a criterion's short name",
    ranking_line("p", ["a", "b"], [[0], [1]], criterion="a" * 41): "'criterion' must be a criterion's short name",
}


def stored(sessions) -> list[tuple[str, str, int]]:
    """(external id, criterion, n tiers) of each ranking, in the order written."""
    with sessions.begin() as s:
        return [(r.external_id, r.criterion, r.n_tiers) for r in s.scalars(select(Ranking).order_by(Ranking.id))]


def test_a_line_names_its_criterion_and_one_id_may_rank_by_several(cli, sessions, tmp_path):
    path = write_lines(tmp_path / "r.jsonl", [*LINES, *BAD])
    out = json.loads(cli("import", "rankings", path, "--json").stdout)
    assert (out["imported"], out["duplicates"], out["quarantined"]) == (4, 0, 3)
    got = stored(sessions)
    assert [(ext, criterion) for ext, criterion, _ in got[:3]] == [
        ("r1", "overall"),
        ("r1", "helpfulness"),
        ("r1", "harmlessness"),
    ]
    assert got[3][1] == "honesty" and len(got[3][0]) == 64  # identified by what it means, its criterion with it
    with sessions.begin() as s:
        assert set(s.scalars(select(Criterion.name))) >= {"overall", "helpfulness", "harmlessness", "honesty"}
        reasons = list(s.scalars(select(RawRecord.reason).where(RawRecord.status == RawStatus.quarantined.value)))
    assert len(reasons) == 3 and all(r.startswith("'criterion' must be a criterion's short name") for r in reasons)

    # the same rankings written again (an explicit "overall" is the same as none) add nothing
    again = [
        json.dumps({**json.loads(line), "criterion": json.loads(line).get("criterion", "overall")}) for line in LINES
    ]
    out = json.loads(cli("import", "rankings", write_lines(tmp_path / "again.jsonl", again), "--json").stdout)
    assert (out["imported"], out["duplicates"]) == (0, 4)
    assert stored(sessions) == got


@st.composite
def lines_with_criteria(draw) -> list[dict]:
    """Ranking lines, each naming a criterion or none (None: the key left out)."""
    lines = [draw(ranking_lines(i)) for i in range(draw(st.integers(1, 5)))]
    for line in lines:
        criterion = draw(st.sampled_from([None, "overall", "helpfulness", "harmlessness"]))
        if criterion is not None:
            line["criterion"] = criterion
    return lines


def meaning(line: dict) -> tuple:
    """What a line ranks, whatever order it lists its replies in: its prompt, annotator, each reply with its tier,
    model and score, and its criterion (overall when it names none)."""
    tier = {i: t for t, members in enumerate(line["ranking"]) for i in members}
    replies = sorted((text, tier[i], line["model"][i], line["scores"][i]) for i, text in enumerate(line["responses"]))
    return (line["prompt"], line["annotator"], line["annotator_kind"], tuple(replies), line.get("criterion", "overall"))


@settings(max_examples=examples(5))
@given(lines=lines_with_criteria())
def test_each_ranking_is_stored_under_its_line_s_criterion_once(sessions, tmp_path_factory, lines):
    """Whatever the lines: a ranking per distinct meaning and criterion (`meaning`), under that criterion;
    writing `overall` or leaving it out is one ranking; importing again, criteria spelt either way, adds nothing."""
    folder = tmp_path_factory.mktemp("lines")
    emptied(sessions)
    done = import_file(sessions, jsonl(folder / "r.jsonl", lines), import_rankings_batch)
    distinct = {meaning(line) for line in lines}
    assert done.imported == len(distinct) and done.imported + done.duplicates == len(lines)
    with sessions.begin() as s:
        held = rankings(s)
    assert Counter(criterion for _, _, criterion, *_ in held.elements()) == Counter(m[-1] for m in distinct)
    flipped = [
        {k: v for k, v in line.items() if k != "criterion"}
        if line.get("criterion") == "overall"
        else {**line, "criterion": line.get("criterion", "overall")}
        for line in lines
    ]
    again = import_file(sessions, jsonl(folder / "again.jsonl", flipped), import_rankings_batch)
    assert (again.imported, again.duplicates) == (0, len(lines))
    with sessions.begin() as s:
        assert rankings(s) == held
