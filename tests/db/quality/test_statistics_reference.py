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
growing union, as a store grows.
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


@dataclass
class Ranked:
    """One generated ranking: its prompt, annotator, tiers of item ids and (a judge's) scores by item."""

    prompt: int
    annotator: str
    tiers: list[list[int]]
    scores: dict[int, float] = field(default_factory=dict)

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


def add_world(rng: random.Random, worlds: Worlds, tmp_path, cli, sessions) -> None:
    """Draw a world of a few prompts, import its rankings and store its gold answers."""
    lines, gold = [], []
    tag = worlds.prompts
    for p in range(worlds.prompts, worlds.prompts + rng.randint(3, 6)):
        n = rng.randint(2, 5)
        items = [100 * p + i for i in range(n)]
        texts = [f"reply {i} to {p} " + "x" * rng.randint(0, 30) + rng.choice(ENDINGS) for i in range(n)]
        worlds.length.update(zip(items, map(len, texts)))
        prompt = f"Prompt {p}: which reply is best?"
        for who in rng.sample(PEOPLE + JUDGES, rng.randint(1, len(PEOPLE) + len(JUDGES))):
            for again in range(2 if who in PEOPLE and rng.random() < 0.15 else 1):
                tiers = _tiers(rng, items)
                ranked = Ranked(p, who, tiers)
                extra = {}
                if who in JUDGES:  # a judge's score beside its tiers: higher for a better tier, none where unranked
                    ranked.scores = {
                        i: len(tiers) - t + rng.choice((0, 0.5)) for t, tier in enumerate(tiers) for i in tier
                    }
                    extra["scores"] = [ranked.scores.get(i) for i in items]
                worlds.rankings.append(ranked)
                index = [[items.index(i) for i in tier] for tier in tiers]
                lines.append(ranking_line(prompt, texts, index, who, ranked.kind, id=f"{p}-{who}-{again}", **extra))
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


def by_prompt(worlds: Worlds) -> dict[int, list[Ranked]]:
    out: dict[int, list[Ranked]] = {}
    for r in worlds.rankings:
        out.setdefault(r.prompt, []).append(r)
    return out


def category(a: Ranked, b: Ranked) -> str:
    return {("human", "human"): "human-human", ("ai", "ai"): "ai-ai"}.get(tuple(sorted((a.kind, b.kind))), "human-ai")


def expected_agreement(worlds: Worlds) -> tuple[dict[str, ref.Tally], dict[frozenset, ref.Tally]]:
    """By category and by annotator pair: every two rankings of a prompt by different annotators."""
    groups = {name: ref.Tally() for name in ("all", "human-human", "ai-ai", "human-ai")}
    pairs: dict[frozenset, ref.Tally] = {}
    for p, rankings in by_prompt(worlds).items():
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


def expected_quality(worlds: Worlds) -> dict[str, dict[str, ref.Tally]]:
    """Each person against gold and against the exact Borda consensus of the other people (leave-one-out)."""
    out = {who: {"gold": ref.Tally(), "consensus": ref.Tally()} for who in PEOPLE}
    for p, rankings in by_prompt(worlds).items():
        people = [r for r in rankings if r.kind == "human"]
        for r in people:
            mine = ref.scoring(r.tiers)
            if p in worlds.gold:
                out[r.annotator]["gold"].add(mine, ref.scoring(worlds.gold[p]), p)
            others = [o.tiers for o in people if o.annotator != r.annotator]
            if others:
                out[r.annotator]["consensus"].add(mine, ref.borda(others), p)
    return out


def expected_judges(worlds: Worlds) -> dict[str, dict]:
    """Each judge against every person's ranking of the prompts both ranked; its length measures."""
    out = {}
    prompts = by_prompt(worlds)
    for judge in JUDGES:
        mine = [r for r in worlds.rankings if r.annotator == judge]
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
    groups, _ = expected_agreement(worlds)
    report = json.loads(cli("stats", "--json").stdout)
    for name, want in groups.items():
        got = report["agreement"][name]
        assert (got["ranking_pairs"], got["shared_pairs"]) == (want.ranking_pairs, want.shared_pairs), name
        assert close(got["pairwise_agreement"], want.agreement) and close(got["kendall_tau"], want.tau), (name, got)
    multi = {p for p, rs in by_prompt(worlds).items() if len({r.annotator for r in rs}) > 1}
    assert report["agreement"]["all"]["prompts"] == len(multi)
    counts = report["counts"]
    assert counts["rankings"]["valid"] == len(worlds.rankings)
    assert counts["valid_rankings_by_kind"] == {
        kind: n for kind in ("human", "ai") if (n := sum(r.kind == kind for r in worlds.rankings))
    }
    assert counts["prompts"] == worlds.prompts and counts["candidates"] == len(worlds.length)


def check_report_agreement(sessions, worlds: Worlds, names: dict[str, str]) -> None:
    from preflab.report.agreement import agreement_section

    groups, pairs = expected_agreement(worlds)
    with sessions() as s:
        section = agreement_section(s, no_text=True)
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
    want = expected_quality(worlds)
    rows = {r["annotator"]: r for r in json.loads(cli("annotators", "--json").stdout)["annotators"]}
    for who in PEOPLE:
        if not any(r.annotator == who for r in worlds.rankings):
            assert names.get(who) not in rows
            continue
        row, mine = rows[names[who]], want[who]
        assert row["rankings"] == sum(r.annotator == who for r in worlds.rankings)
        for which in ("gold", "consensus"):
            tally = mine[which]
            assert row[f"{which}_rankings"] == tally.ranking_pairs, (who, which)
            assert close(row[f"{which}_tau"], tally.tau), (who, which, row)
            assert close(row[f"{which}_pairwise"], tally.agreement), (who, which, row)


def check_judges(cli, sessions, worlds: Worlds) -> None:
    from preflab.report.judges import judges_section
    from preflab.training.selfreward.report import judge_agreement

    want = expected_judges(worlds)
    rows = {r["name"]: r for r in json.loads(cli("stats", "--judges", "--json").stdout)["judges"]}
    with sessions() as s:
        page = {r["judge"]: r for r in judges_section(s)}
    for judge, w in want.items():
        if not w["rankings"]:
            assert judge not in rows
            continue
        row, tally = rows[judge], w["tally"]
        assert row["rankings"] == w["rankings"] and row["shared_pairs"] == tally.shared_pairs
        assert row["shared_prompts"] == len(tally.prompts)
        assert close(row["agreement"], tally.agreement) and close(row["kendall_tau"], tally.tau), row
        assert (row["agreement_low"] is None) == (w["interval_prompts"] < 5), row
        if row["agreement_low"] is not None:  # a percentile interval: within the range of the per-prompt rates
            assert 0 <= row["agreement_low"] <= row["agreement_high"] <= 1
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


def test_the_reference_borda_is_exact():
    """Three rankings of one prompt: the consensus in fractions, as the definition gives it."""
    scores = ref.borda([[[1], [2, 3]], [[3], [1]], [[2]]])
    assert scores == {1: Fraction(1, 2), 2: Fraction(1, 4), 3: Fraction(5, 8)}
