"""Annotator quality in a simulated world: the careless are flagged and left out, the careful are not."""

import json

import pytest
from sqlalchemy import func, select

from preflab.db.models import Annotator, Comparison, GoldAnswer, Prompt, Ranking
from preflab.db.quality.gold import read_gold, store_gold
from preflab.errors import InputError
from tests.db.quality.quality_world import export_file, make_world

# Label Studio user id -> how that person works
PEOPLE = {1: "careful", 2: "careful", 3: "careful", 4: "careful", 5: "random", 6: "shown"}
CARELESS = {5, 6}


def pseudonyms(sessions) -> dict[int, str]:
    """Label Studio user id -> pseudonym."""
    with sessions() as s:
        return {int(name.rsplit("-", 1)[1]): p for name, p in s.execute(select(Annotator.name, Annotator.pseudonym))}


@pytest.fixture
def world_db(cli, sessions, tmp_path):
    world = make_world()
    cli("ls", "import", export_file(world, PEOPLE, tmp_path / "export.json"))
    gold = tmp_path / "gold.jsonl"
    gold.write_text(world.gold_lines(), encoding="utf-8")
    with sessions.begin() as s:
        assert store_gold(s, read_gold(gold), origin=gold.name).new == len(world.gold)
    return world


def test_careless_annotators_are_flagged_and_careful_ones_are_not(cli, sessions, world_db):
    names = pseudonyms(sessions)
    report = json.loads(cli("annotators", "--json").stdout)
    rows = {r["annotator"]: r for r in report["annotators"]}
    assert set(rows) == set(names.values())
    for uid, behaviour in PEOPLE.items():
        row = rows[names[uid]]
        assert row["rankings"] == 30 and row["gold_rankings"] == 6 and row["consensus_rankings"] == 30
        if behaviour == "careful":
            assert row["flags"] == {}, (uid, row)
            assert row["gold_tau"] > 0.7 and row["consensus_tau"] > 0.6 and row["median_seconds"] > 15
    random_one, shown_one = rows[names[5]], rows[names[6]]
    assert {"low-consensus-agreement", "too-fast"} <= set(random_one["flags"])
    assert random_one["consensus_tau"] < 0.2 and random_one["median_seconds"] < 3
    assert {"mostly-unchanged", "low-consensus-agreement"} <= set(shown_one["flags"])
    assert shown_one["same_as_shown"] == 1.0
    # Gold agreement of a careful annotator is measured against the known order, pairwise too.
    careful_row = rows[names[1]]
    assert 0.8 <= careful_row["gold_pairwise"] <= 1.0

    text = cli("annotators").stdout
    assert "2 of 6 annotators flagged" in text and names[5] in text and "label-studio-user" not in text

    # Stricter thresholds flag more; looser ones fewer.
    loose = json.loads(
        cli(
            "annotators",
            "--json",
            "--min-consensus-tau",
            "-1",
            "--max-unchanged",
            "1",
            "--min-seconds",
            "0",
            "--min-gold-tau",
            "-1",
        ).stdout
    )
    assert all(r["flags"] == {} for r in loose["annotators"])


def test_pairs_build_leaves_flagged_annotators_and_gold_prompts_out_and_exports_say_so(
    cli, sessions, world_db, tmp_path
):
    names = pseudonyms(sessions)
    built = json.loads(cli("pairs", "build", "--exclude-flagged", "--json").stdout)
    assert set(built["excluded"]) == {names[u] for u in CARELESS}
    assert any(r.startswith("too-fast:") for r in built["excluded"][names[5]])
    with sessions() as s:
        by = set(
            s.scalars(
                select(Annotator.name)
                .join(Ranking, Ranking.annotator_id == Annotator.id)
                .join(Comparison, Comparison.ranking_id == Ranking.id)
                .distinct()
            )
        )
        gold_prompts = set(s.scalars(select(GoldAnswer.prompt_id)))
        built_prompts = set(s.scalars(select(Comparison.prompt_id).distinct()))
        n_pairs = s.scalar(select(func.count()).select_from(Comparison))
    assert by == {f"label-studio-user-{u}" for u in PEOPLE if u not in CARELESS}
    assert not gold_prompts & built_prompts and len(built_prompts) == 30 - 6
    assert n_pairs == 4 * 24 * 10  # four careful people, 24 prompts, 5C2 pairs each

    info = json.loads(cli("export", tmp_path / "out", "--format", "jsonl", "--json").stdout)
    assert set(info["excluded_annotators"]) == {names[u] for u in CARELESS}
    card = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert "Left out 2 annotators" in card and names[6] in card and "mostly-unchanged" in card
    rows = [json.loads(line) for line in (tmp_path / "out" / "train.jsonl").read_text().splitlines()]
    with sessions() as s:
        gold_texts = set(s.scalars(select(Prompt.text).where(Prompt.id.in_(gold_prompts))))
    assert not {r["prompt"][-1]["content"] for r in rows} & gold_texts  # the last user turn
    assert not {r["annotator"] for r in rows} & {names[u] for u in CARELESS}

    # --min-agreement leaves out by agreement only; a plain build takes everyone back (but never gold).
    strict = json.loads(cli("pairs", "build", "--min-agreement", "0.5", "--json").stdout)
    assert set(strict["excluded"]) == {names[u] for u in CARELESS}
    assert all(r.startswith("low-") for reasons in strict["excluded"].values() for r in reasons)
    everyone = json.loads(cli("pairs", "build", "--json").stdout)
    assert not everyone["excluded"] and everyone["pairs"] == 6 * 24 * 10
    again = json.loads(cli("export", tmp_path / "all", "--format", "jsonl", "--json").stdout)
    assert again["excluded_annotators"] == {}
    assert "No annotator was left out" in (tmp_path / "all" / "README.md").read_text(encoding="utf-8")


def test_a_bad_gold_file_stores_nothing(sessions, tmp_path):
    good = json.dumps({"prompt": "Best colour?", "responses": ["blue", "red"], "ranking": [[0], [1]]})
    for line, reason in [
        (json.dumps({"prompt": "Tie?", "responses": ["a", "b"], "ranking": [[0, 1]]}), "single tier"),
        (
            json.dumps({"prompt": "Who?", "responses": ["a", "b"], "ranking": [[0], [1]], "annotator": "x"}),
            "has no annotator",
        ),
        (json.dumps({"prompt": "Out?", "responses": ["a", "b"], "ranking": [[0], [2]]}), "out of range"),
        ("{not json", "not valid JSON"),
        (good, "again"),
    ]:
        path = tmp_path / "gold.jsonl"
        path.write_text(good + "\n" + line + "\n", encoding="utf-8")
        with pytest.raises(InputError, match=f"gold.jsonl line 2: .*{reason}.*no gold answer was stored"):
            read_gold(path)

    path = tmp_path / "ok.jsonl"
    path.write_text(good + "\n", encoding="utf-8")
    with sessions.begin() as s:
        store_gold(s, read_gold(path), origin="ok.jsonl")
    flipped = tmp_path / "flipped.jsonl"
    flipped.write_text(
        json.dumps({"prompt": "New?", "responses": ["x", "y"], "ranking": [[1], [0]]})
        + "\n"
        + json.dumps({"prompt": "Best colour?", "responses": ["blue", "red"], "ranking": [[1], [0]]})
        + "\n",
        encoding="utf-8",
    )
    with pytest.raises(InputError, match="differently from its stored gold answer"), sessions.begin() as s:
        store_gold(s, read_gold(flipped), origin="flipped.jsonl")
    with sessions() as s:  # the first line of the refused file was not kept either
        assert s.scalar(select(func.count()).select_from(GoldAnswer)) == 1
        assert s.scalar(select(func.count()).where(Prompt.text == "New?")) == 0


def test_the_numbers_equal_borda_and_compare_rankings_ranking_by_ranking(cli, sessions, tmp_path):
    """Ties, partly ranked candidates, two rankings by one person of one prompt, partial gold answers."""
    import random
    from collections import defaultdict

    from preflab.db.pairs.build import borda, tiers_from_scores
    from preflab.db.pairs.views import iter_prompt_rankings
    from preflab.db.quality.agreement import Agreement, compare_rankings
    from preflab.db.quality.annotators import annotator_quality
    from preflab.db.quality.gold import gold_tiers
    from tests.db.helpers import ranking_line, write_lines

    rng = random.Random(7)

    def tiers(n: int) -> list[list[int]]:
        out: list[list[int]] = []
        for index in rng.sample(range(n), rng.randint(1, n)):
            if out and rng.random() < 0.3:
                out[-1].append(index)
            else:
                out.append([index])
        return out

    responses = {p: [f"response {i} of prompt {p}" for i in range(rng.randint(2, 6))] for p in range(40)}
    lines = [
        ranking_line(f"prompt {p}", r, tiers(len(r)), annotator=f"person{a}", id=f"{p}-{a}-{n}")
        for p, r in responses.items()
        for a in rng.sample(range(5), rng.randint(1, 4))
        for n in range(1 if rng.random() < 0.9 else 2)
    ]
    cli("import", "rankings", write_lines(tmp_path / "rankings.jsonl", lines))
    gold = [
        json.dumps(
            {
                "prompt": f"prompt {p}",
                "responses": responses[p],
                "ranking": [[i] for i in rng.sample(range(len(responses[p])), 2)],
            }
        )
        for p in range(0, 40, 4)
    ]
    with sessions.begin() as s:
        store_gold(s, read_gold(write_lines(tmp_path / "gold.jsonl", gold)))

    expected: dict[int, dict[str, Agreement]] = defaultdict(lambda: {"gold": Agreement(), "consensus": Agreement()})

    def add(agreement: Agreement, first, second) -> None:
        shared, agreeing, tau = compare_rankings(first, second)
        agreement.ranking_pairs += 1
        agreement.shared_pairs += shared
        agreement.agreeing_pairs += agreeing
        agreement.taus += [] if tau is None else [tau]

    with sessions() as s:
        answers = gold_tiers(s)
        for pid, views in iter_prompt_rankings(s, "human"):
            for v in views:
                if pid in answers:
                    add(expected[v.annotator_id]["gold"], v.tiers, answers[pid])
                others = [w.tiers for w in views if w.annotator_id != v.annotator_id]
                if others:
                    add(expected[v.annotator_id]["consensus"], v.tiers, tiers_from_scores(borda(others), 1e-6))
        got = annotator_quality(s)
    assert {q.annotator_id for q in got} == set(expected) and len(got) == 5
    assert sum(e["gold"].ranking_pairs for e in expected.values()) >= 10
    assert sum(e["consensus"].shared_pairs for e in expected.values()) >= 100
    for q in got:
        for which in ("gold", "consensus"):
            mine, theirs = getattr(q, which).as_dict(), expected[q.annotator_id][which].as_dict()
            assert {k: mine[k] for k in ("ranking_pairs", "shared_pairs")} == {
                k: theirs[k] for k in ("ranking_pairs", "shared_pairs")
            }, (q.annotator_id, which)
            for key in ("pairwise_agreement", "kendall_tau"):
                assert mine[key] == pytest.approx(theirs[key], abs=1e-12), (q.annotator_id, which, key)
