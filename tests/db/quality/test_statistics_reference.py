"""Every agreement statistic `stats`, `annotators`, `stats --judges`, the report and the self-rewarding
loop's report print, against the reference.

A law over generated stores, on SQLite and on Postgres: rankings with ties and
unranked candidates, by people and AI annotators, a person now and then ranking a
prompt twice, gold answers for some prompts, judges' scores beside their tiers and
replies of every length (accents and emoji included, as lengths count characters).
Whatever the store holds, each number preflab prints equals the one computed again
from the generated rankings by `tests/db/quality/reference.py` (scipy's tau-b,
plain pair counts, an exact Borda consensus), never from preflab's own readers.
Each example adds a world to the same store, so the laws are checked on the
growing union, as a store grows. In a store of several criteria every number is
one criterion's: the reference compares only rankings of the same criterion.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from preflab.db.models import Annotator, Prompt
from preflab.db.quality.gold import read_gold, store_gold
from tests.db.helpers import ranking_line, write_lines
from tests.db.quality import reference as ref
from tests.properties import examples

PEOPLE = ("person0", "person1", "person2", "person3")
JUDGES = ("judge0", "judge1")
ENDINGS = ("", "é", "😀", "  ", "日本")
OVERALL = "overall"
CRITERIA = (OVERALL, "helpfulness", "harmlessness")


@dataclass
class Ranked:
    """One generated ranking: its prompt, annotator, tiers of item ids and (a judge's) scores by item."""

    prompt: int
    annotator: str
    tiers: list[list[int]]
    scores: dict[int, float] = field(default_factory=dict)
    criterion: str = OVERALL

    @property
    def kind(self) -> str:
        return "ai" if self.annotator in JUDGES else "human"


@dataclass
class Worlds:
    """Everything generated so far: rankings, gold tiers by prompt, each item's reply length in characters."""

    rankings: list[Ranked] = field(default_factory=list)
    gold: dict[int, list[list[int]]] = field(default_factory=dict)
    length: dict[int, int] = field(default_factory=dict)
    prompts: int = 0


def _tiers(rng: random.Random, items: list[int], least: int = 1) -> list[list[int]]:
    """Mostly every item ranked; now and then some left unranked; ties about one time in three."""
    kept = rng.sample(items, len(items) if rng.random() < 0.6 else rng.randint(least, len(items)))
    out: list[list[int]] = []
    for item in kept:
        if out and rng.random() < 0.3:
            out[-1].append(item)
        else:
            out.append([item])
    return out


def add_world(rng: random.Random, worlds: Worlds, tmp_path, cli, sessions, criteria=(OVERALL,)) -> None:
    """Draw a world of a few prompts, import its rankings and store its gold answers.

    Each annotator of a prompt ranks it by one or two of `criteria` (a JSON Lines row per criterion, of one id).
    """
    lines, gold = [], []
    tag = worlds.prompts
    for p in range(worlds.prompts, worlds.prompts + rng.randint(3, 6)):
        n = rng.randint(2, 5)
        items = [100 * p + i for i in range(n)]
        texts = [f"reply {i} to {p} " + "x" * rng.randint(0, 30) + rng.choice(ENDINGS) for i in range(n)]
        worlds.length.update(zip(items, map(len, texts)))
        prompt = f"Prompt {p}: which reply is best?"
        for who in rng.sample(PEOPLE + JUDGES, rng.randint(1, len(PEOPLE) + len(JUDGES))):
            for criterion in rng.sample(criteria, rng.randint(1, min(2, len(criteria)))):
                for again in range(2 if who in PEOPLE and rng.random() < 0.15 else 1):
                    tiers = _tiers(rng, items)
                    ranked = Ranked(p, who, tiers, criterion=criterion)
                    extra = {} if criterion == OVERALL else {"criterion": criterion}
                    if who in JUDGES:  # a judge's score beside its tiers: higher for a better tier, none where unranked
                        ranked.scores = {
                            i: len(tiers) - t + rng.choice((0, 0.5)) for t, tier in enumerate(tiers) for i in tier
                        }
                        extra["scores"] = [ranked.scores.get(i) for i in items]
                    worlds.rankings.append(ranked)
                    index = [[items.index(i) for i in tier] for tier in tiers]
                    line = ranking_line(prompt, texts, index, who, ranked.kind, id=f"{p}-{who}-{again}", **extra)
                    lines.append(line)
        if rng.random() < 0.4:
            tiers = _tiers(rng, items, least=2)
            if len(tiers) < 2:
                tiers = [tiers[0][:1], tiers[0][1:]]
            worlds.gold[p] = tiers
            index = [[items.index(i) for i in tier] for tier in tiers]
            gold.append(json.dumps({"prompt": prompt, "responses": texts, "ranking": index}))
        worlds.prompts = p + 1
    cli("import", "rankings", write_lines(tmp_path / f"rankings-{tag}.jsonl", lines))
    if gold:
        with sessions.begin() as s:
            store_gold(s, read_gold(write_lines(tmp_path / f"gold-{tag}.jsonl", gold)))


def criteria_of(worlds: Worlds) -> list[str]:
    """The criteria the generated rankings have, in name order."""
    return sorted({r.criterion for r in worlds.rankings}) or [OVERALL]


def by_prompt(worlds: Worlds, criterion: str = OVERALL) -> dict[int, list[Ranked]]:
    """The rankings of `criterion`, by prompt: the reference never compares two criteria."""
    out: dict[int, list[Ranked]] = {}
    for r in worlds.rankings:
        if r.criterion == criterion:
            out.setdefault(r.prompt, []).append(r)
    return out


def category(a: Ranked, b: Ranked) -> str:
    return {("human", "human"): "human-human", ("ai", "ai"): "ai-ai"}.get(tuple(sorted((a.kind, b.kind))), "human-ai")


def expected_agreement(
    worlds: Worlds, criterion: str = OVERALL
) -> tuple[dict[str, ref.Tally], dict[frozenset, ref.Tally]]:
    """By category and by annotator pair: every two rankings of a prompt by different annotators, in `criterion`."""
    groups = {name: ref.Tally() for name in ("all", "human-human", "ai-ai", "human-ai")}
    pairs: dict[frozenset, ref.Tally] = {}
    for p, rankings in by_prompt(worlds, criterion).items():
        for a, b in combinations(rankings, 2):
            if a.annotator == b.annotator:
                continue
            first, second = ref.scoring(a.tiers), ref.scoring(b.tiers)
            for tally in (
                groups["all"],
                groups[category(a, b)],
                pairs.setdefault(frozenset((a.annotator, b.annotator)), ref.Tally()),
            ):
                tally.add(first, second, p)
    return groups, pairs


def expected_quality(worlds: Worlds, criterion: str = OVERALL) -> dict[str, dict[str, ref.Tally]]:
    """Each person against gold (an overall order) and against the exact Borda consensus of the other people's
    rankings of the criterion (leave-one-out)."""
    out = {who: {"gold": ref.Tally(), "consensus": ref.Tally()} for who in PEOPLE}
    for p, rankings in by_prompt(worlds, criterion).items():
        people = [r for r in rankings if r.kind == "human"]
        for r in people:
            mine = ref.scoring(r.tiers)
            if p in worlds.gold and criterion == OVERALL:
                out[r.annotator]["gold"].add(mine, ref.scoring(worlds.gold[p]), p)
            others = [o.tiers for o in people if o.annotator != r.annotator]
            if others:
                out[r.annotator]["consensus"].add(mine, ref.borda(others), p)
    return out


def expected_judges(worlds: Worlds, criterion: str = OVERALL) -> dict[str, dict]:
    """Each judge against every person's ranking of the prompts both ranked by `criterion`; its length measures."""
    out = {}
    prompts = by_prompt(worlds, criterion)
    for judge in JUDGES:
        mine = [r for r in worlds.rankings if r.annotator == judge and r.criterion == criterion]
        tally, per_prompt = ref.Tally(), {}
        longer = pairs = 0
        for r in mine:
            for person in (o for o in prompts[r.prompt] if o.kind == "human"):
                before = tally.shared_pairs
                tally.add(ref.scoring(r.tiers), ref.scoring(person.tiers), r.prompt)
                per_prompt[r.prompt] = per_prompt.get(r.prompt, 0) + tally.shared_pairs - before
            where = ref.place(r.tiers)
            for a, b in combinations(sorted(where), 2):
                if where[a] != where[b] and worlds.length[a] != worlds.length[b]:
                    pairs += 1
                    better, worse = (a, b) if where[a] < where[b] else (b, a)
                    longer += worlds.length[better] > worlds.length[worse]
        points = [(s, worlds.length[i]) for r in mine for i, s in r.scores.items()]
        out[judge] = {
            "rankings": len(mine),
            "tally": tally,
            "interval_prompts": sum(n > 0 for n in per_prompt.values()),
            "longer_wins": longer / pairs if pairs else None,
            "length_pairs": pairs,
            "length_correlation": ref.pearson(points),
        }
    return out


def close(got, want) -> bool:
    return (got is None and want is None) or (
        got is not None and want is not None and got == pytest.approx(want, abs=1e-9)
    )


def check_stats(cli, worlds: Worlds) -> None:
    report = json.loads(cli("stats", "--json").stdout)
    assert list(report["agreement"]) == criteria_of(worlds)  # one entry per criterion, in name order
    for criterion in criteria_of(worlds):
        groups, _ = expected_agreement(worlds, criterion)
        for name, want in groups.items():
            got = report["agreement"][criterion][name]
            assert (got["ranking_pairs"], got["shared_pairs"]) == (want.ranking_pairs, want.shared_pairs), name
            assert close(got["pairwise_agreement"], want.agreement) and close(got["kendall_tau"], want.tau), got
        multi = {p for p, rs in by_prompt(worlds, criterion).items() if len({r.annotator for r in rs}) > 1}
        assert report["agreement"][criterion]["all"]["prompts"] == len(multi)
    counts = report["counts"]
    assert counts["rankings"]["valid"] == len(worlds.rankings)
    assert counts["valid_rankings_by_kind"] == {
        kind: n for kind in ("human", "ai") if (n := sum(r.kind == kind for r in worlds.rankings))
    }
    assert counts["valid_rankings_by_criterion"] == {
        c: sum(r.criterion == c for r in worlds.rankings) for c in criteria_of(worlds)
    }
    assert counts["prompts"] == worlds.prompts and counts["candidates"] == len(worlds.length)


def check_report_agreement(sessions, worlds: Worlds, names: dict[str, str], criterion: str = OVERALL) -> None:
    from preflab.report.agreement import agreement_section

    groups, pairs = expected_agreement(worlds, criterion)
    with sessions() as s:
        section = agreement_section(s, no_text=True, criterion=criterion)
    if not groups["all"].ranking_pairs:  # no two annotators ranked one prompt
        assert section["categories"] is None and section["heatmap"] is None
        return
    for name, want in groups.items():
        got = section["categories"][name]
        assert (got["ranking_pairs"], got["shared_pairs"]) == (want.ranking_pairs, want.shared_pairs), name
        assert close(got["pairwise_agreement"], want.agreement) and close(got["kendall_tau"], want.tau), (name, got)
    heat = section["heatmap"] or {"labels": [], "agreement": []}
    who = {
        name: i
        for name, pseudonym in names.items()
        for i, label in enumerate(heat["labels"])
        if name in label or pseudonym in label
    }
    shown = 0
    for key, want in pairs.items():
        a, b = sorted(key)
        if not want.shared_pairs:
            continue
        i, j = who[a], who[b]
        assert heat["shared_pairs"][i][j] == want.shared_pairs and close(heat["agreement"][i][j], want.agreement)
        shown += 1
    assert shown == sum(x is not None for row in heat["agreement"] for x in row) // 2


def check_annotators(cli, worlds: Worlds, names: dict[str, str]) -> None:
    rows = {(r["annotator"], r["criterion"]): r for r in json.loads(cli("annotators", "--json").stdout)["annotators"]}
    for criterion in criteria_of(worlds):
        want = expected_quality(worlds, criterion)
        for who in PEOPLE:
            mine = [r for r in worlds.rankings if r.annotator == who and r.criterion == criterion]
            if not mine:
                assert (names.get(who), criterion) not in rows
                continue
            row = rows[(names[who], criterion)]
            assert row["rankings"] == len(mine)
            for which in ("gold", "consensus"):
                tally = want[who][which]
                assert row[f"{which}_rankings"] == tally.ranking_pairs, (who, which)
                assert close(row[f"{which}_tau"], tally.tau), (who, which, row)
                assert close(row[f"{which}_pairwise"], tally.agreement), (who, which, row)


def check_trust_table(cli, worlds: Worlds) -> dict[str, dict]:
    """`stats --judges`: one row per judge and criterion, each against the reference of its criterion."""
    rows = {(r["name"], r["criterion"]): r for r in json.loads(cli("stats", "--judges", "--json").stdout)["judges"]}
    for criterion in criteria_of(worlds):
        for judge, w in expected_judges(worlds, criterion).items():
            if not w["rankings"]:
                assert (judge, criterion) not in rows
                continue
            row, tally = rows[(judge, criterion)], w["tally"]
            assert row["rankings"] == w["rankings"] and row["shared_pairs"] == tally.shared_pairs
            assert row["shared_prompts"] == len(tally.prompts)
            assert close(row["agreement"], tally.agreement) and close(row["kendall_tau"], tally.tau), row
            assert (row["agreement_low"] is None) == (w["interval_prompts"] < 5), row
            if row["agreement_low"] is not None:  # a percentile interval: within the range of the per-prompt rates
                assert 0 <= row["agreement_low"] <= row["agreement_high"] <= 1
    assert len(rows) == sum(
        bool(w["rankings"]) for c in criteria_of(worlds) for w in expected_judges(worlds, c).values()
    )
    return {judge: row for (judge, _), row in rows.items()}


def check_judges(cli, sessions, worlds: Worlds) -> None:
    """The trust table, and (a store of `overall` rankings) the report's page and the self-rewarding loop."""
    from preflab.report.judges import judges_section
    from preflab.training.selfreward.report import judge_agreement

    rows = check_trust_table(cli, worlds)
    want = expected_judges(worlds)
    with sessions() as s:
        page = {r["judge"]: r for r in judges_section(s)}
    for judge, w in want.items():
        if not w["rankings"]:
            continue
        row, tally = rows[judge], w["tally"]
        on_page = page[row["judge"]]
        assert on_page["human_shared_pairs"] == tally.shared_pairs and on_page["human_prompts"] == len(tally.prompts)
        assert close(on_page["human_agreement"], tally.agreement) and close(on_page["human_kendall_tau"], tally.tau)
        assert on_page["length_pairs"] == w["length_pairs"] and close(on_page["longer_wins"], w["longer_wins"])
        assert close(on_page["length_correlation"], w["length_correlation"]), (on_page, w)
        assert on_page["position_bias"] is None  # imported rankings keep no verdicts in both orders
        # The self-rewarding loop's report measures its judge the same way.
        with sessions() as s:
            judge_id = s.scalar(select(Annotator.id).where(Annotator.name == judge))
            loop = judge_agreement(s, judge_id, list(s.scalars(select(Prompt.id))))
        assert (loop["prompts"], loop["shared_pairs"]) == (len(tally.prompts), tally.shared_pairs)
        assert close(loop["pairwise_agreement"], tally.agreement) and close(loop["kendall_tau"], tally.tau)


def test_every_agreement_statistic_equals_the_reference(cli, sessions, tmp_path):
    worlds = Worlds()

    @settings(max_examples=examples(3))
    @given(st.randoms(use_true_random=False))
    def grow(rng):
        add_world(rng, worlds, tmp_path, cli, sessions)
        with sessions() as s:
            names = dict(s.execute(select(Annotator.name, Annotator.pseudonym)).all())
        check_stats(cli, worlds)
        check_report_agreement(sessions, worlds, names)
        check_annotators(cli, worlds, names)
        check_judges(cli, sessions, worlds)

    grow()
    # The examples were not trivial: people and judges shared prompts, with ties, unranked replies and gold.
    groups, _ = expected_agreement(worlds)
    judged = expected_judges(worlds)
    assert all(g.shared_pairs for g in groups.values()) and worlds.gold
    assert all(w["tally"].shared_pairs for w in judged.values())
    assert any(len(tier) > 1 for r in worlds.rankings for tier in r.tiers)


def test_every_statistic_of_a_store_of_several_criteria_is_each_criterions_own(cli, sessions, tmp_path):
    """The same laws with rankings of three criteria, an annotator often ranking one prompt by two: each number
    `stats`, `annotators`, `stats --judges` and the report's agreement section give is the reference's over
    that criterion's rankings alone."""
    worlds = Worlds()

    @settings(max_examples=examples(3))
    @given(st.randoms(use_true_random=False))
    def grow(rng):
        add_world(rng, worlds, tmp_path, cli, sessions, CRITERIA)
        with sessions() as s:
            names = dict(s.execute(select(Annotator.name, Annotator.pseudonym)).all())
        check_stats(cli, worlds)
        for criterion in criteria_of(worlds):
            check_report_agreement(sessions, worlds, names, criterion)
        check_annotators(cli, worlds, names)
        check_trust_table(cli, worlds)

    grow()
    # Not trivial: every criterion had rankings compared, judges against people too, and the same annotator
    # ranked one prompt by two criteria (the pairs a mixture would compare).
    assert criteria_of(worlds) == sorted(CRITERIA)
    assert all(expected_agreement(worlds, criterion)[0]["all"].shared_pairs for criterion in CRITERIA)
    assert any(w["tally"].shared_pairs for c in CRITERIA for w in expected_judges(worlds, c).values())
    assert len({(r.prompt, r.annotator) for r in worlds.rankings}) < len(worlds.rankings)


def test_the_reference_borda_is_exact():
    """Three rankings of one prompt: the consensus in fractions, as the definition gives it."""
    scores = ref.borda([[[1], [2, 3]], [[3], [1]], [[2]]])
    assert scores == {1: Fraction(1, 2), 2: Fraction(1, 4), 3: Fraction(5, 8)}
