"""Battles between models, read from the rankings: who met whom, and who won.

A ranking of k candidates is k·(k−1)/2 battles, one per pair of candidates: the
better tier wins, and two candidates in one tier tie (a tie of either kind: the
comparisons table leaves ties out, so the leaderboard reads the tiers itself). The
rankings read are those `pairs build` takes (`preflab.db.pairs.incremental.eligible`:
valid, never a gold prompt's), of those the filters keep: the battles of the rankings a
filter leaves out are counted in `left_out`, each under the first filter that refused it.
A reply's model is the one its ranking's source row named (`RankingItem.model`: a candidate
is shared by every ranking of its prompt and text, so one reply can be two models' in two
battles), else its candidate's model version's name, else the candidate's `model`; a battle
between two replies of one model, or with a reply of no known model, is left out and counted.
An Arena battle whose two models gave the same reply is a ranking of that one reply; its details name
both models and keep the verdict (`preflab.db.ingest.datasets.arena`), and it is read as the battle it
was (`identical_battles`), a win, loss or tie like any other.

Each battle keeps its ranking (the bootstrap draws rankings: a two-way battle is one
ranking, as in Chatbot Arena) and, for style control, its two candidates.

A ranking orders by one criterion (`Ranking.criterion`), so its battles are that criterion's:
the battles are read for one criterion at a time (`Filters.criterion`), and a board is one
criterion's. The rankings of other criteria are not "left out": they are other boards.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import and_, case, func, not_, select
from sqlalchemy.orm import Session, aliased

from preflab.db.bulk import lookup
from preflab.db.ingest.datasets.arena import IDENTICAL
from preflab.db.models import OVERALL, Annotator, Candidate, ModelVersion, Prompt, Ranking, RankingItem
from preflab.db.pairs.incremental import eligible

# FastChat's style elements: the reply's length (here in characters: preflab stores no token
# counts) and its markdown headers, list items and bold spans, counted outside code blocks.
STYLE_FEATURES = ("length", "headers", "lists", "bold")
WINNERS = {"model_a": 1.0, "model_b": 0.0, "tie": 0.5, "tie (bothbad)": 0.5, "both_bad": 0.5}
_CODE = re.compile(r"```[^`]*```")
_HEADER = re.compile(r"^#{1,6}\s", re.MULTILINE)
_ORDERED = re.compile(r"^\s*\d+\.\s", re.MULTILINE)
_UNORDERED = re.compile(r"^\s*[-*+]\s", re.MULTILINE)
_BOLD = (re.compile(r"\*\*[^*\n]+\*\*"), re.compile(r"__[^_\n]+__"))
CHUNK = 100_000  # battles read from the database at a time
ARENA = "import:arena"  # the source of Chatbot Arena's rankings, the only ones of identical replies


@dataclass
class Battles:
    """Battles as arrays, one entry each; models are indices into `models`."""

    models: list[str]
    a: np.ndarray  # int64 model index of one side
    b: np.ndarray  # of the other
    outcome: np.ndarray  # float64: 1 a won, 0.5 tie, 0 b won
    group: np.ndarray  # int64: the ranking it came from, 0..rankings-1
    candidates: np.ndarray | None = None  # (N, 2) candidate ids of a and b (read from a store)
    left_out: dict[str, int] = field(default_factory=dict)  # why battles were not kept -> how many

    def __len__(self) -> int:
        return len(self.a)

    @property
    def rankings(self) -> int:
        return int(self.group.max()) + 1 if len(self.group) else 0


def empty() -> Battles:
    none = np.zeros(0, dtype=np.int64)
    return Battles([], none, none, np.zeros(0), none)


def numbered(model_a, model_b) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(models, a, b): names numbered in order of first appearance, model_a's column then model_b's.

    That is pandas' `factorize`, as FastChat numbers them (its bootstrap draws then match ours).
    """
    index: dict[str, int] = {}
    codes = np.fromiter((index.setdefault(m, len(index)) for m in itertools.chain(model_a, model_b)), np.int64)
    n = len(codes) // 2
    return list(index), codes[:n], codes[n:]


def _by_name(names: list[str], a: np.ndarray, b: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(models, a, b): the models that battled, numbered by name.

    A store's rankings and candidates are numbered in the order rows were stored, and a bootstrap's
    draws follow the models' numbers: numbered by name (and each battle turned by its replies' content
    hashes, `read_battles`), the same rankings stored in another order give the same intervals.
    """
    used, inverse = np.unique(np.concatenate([a, b]), return_inverse=True)
    order = sorted(range(len(used)), key=lambda k: names[used[k]])
    place = np.empty(len(used), dtype=np.int64)
    place[order] = np.arange(len(used))
    inverse = place[inverse.reshape(-1)]
    return [names[used[k]] for k in order], inverse[: len(a)], inverse[len(a) :]


def from_labels(model_a, model_b, winner, group=None) -> Battles:
    """Battles from model names and Chatbot Arena's `winner` (model_a, model_b, tie, tie (bothbad)).

    Each battle is its own ranking unless `group` says which battles came from one ranking.
    """
    models, a, b = numbered(model_a, model_b)
    outcome = np.array([WINNERS[w] for w in winner], dtype=np.float64)
    group = np.arange(len(a)) if group is None else np.unique(np.asarray(group), return_inverse=True)[1]
    return Battles(models, a, b, outcome, group.reshape(-1).astype(np.int64))


@dataclass
class Filters:
    """Which rankings count: the criterion, the annotators' kind, since when, from where, which prompts."""

    annotator_kind: str = "any"  # human | ai | any
    since: datetime | None = None  # rankings stored at or after this (UTC)
    # Rankings of this source (`Ranking.source`): "import:<format>" for a public dataset ("import:arena", the
    # source of its raw records too), "import" for JSON Lines rankings, "label-studio", "judge", "bon".
    source: str | None = None
    split: str | None = None  # prompts of this split (train, test)
    criterion: str = OVERALL  # what the rankings order by: a board is one criterion's

    def read(self):
        """SQL: the ranking is one a board of this criterion reads (before the filters' rules)."""
        return and_(eligible("any", ()), Ranking.criterion == self.criterion)

    def rules(self) -> list[tuple[str, Any]]:
        """(why a battle is left out, the SQL condition a ranking must meet) for each filter given."""
        rules = []
        if self.annotator_kind != "any":
            other = "people" if self.annotator_kind == "ai" else "AI judges"
            rules.append(
                (
                    f"rankings by {other} (--annotator-kind {self.annotator_kind})",
                    Ranking.annotator_id.in_(select(Annotator.id).where(Annotator.kind == self.annotator_kind)),
                )
            )
        if self.source is not None:
            rules.append((f"rankings whose source is not {self.source} (--source)", Ranking.source == self.source))
        if self.split is not None:
            rules.append(
                (
                    f"prompts not of split {self.split} (--prompts)",
                    Ranking.prompt_id.in_(select(Prompt.id).where(Prompt.split == self.split)),
                )
            )
        if self.since is not None:
            rules.append(
                (f"rankings stored before {self.since:%Y-%m-%d %H:%M} UTC (--since)", Ranking.created_at >= self.since)
            )
        return rules


def identical_battles():
    """SQL: the ranking is an Arena battle of identical replies (one reply; details name both models)."""
    return and_(Ranking.n_tiers == 1, Ranking.source == ARENA, Ranking.details[IDENTICAL].as_string().is_not(None))


def _identical_rows(session: Session, chosen, rules: list, index: dict[str, int]) -> list[np.ndarray]:
    """The battles of identical replies the filters keep, as `read_battles` reads the others' columns.

    (ranking, candidate, candidate, outcome, model a's code, model b's code): the verdict is the details'
    `winner`, as Chatbot Arena wrote it (the ranking's one tier says nothing of it).
    """
    query = (
        select(Ranking.id, RankingItem.candidate_id, Ranking.details)
        .join(RankingItem, RankingItem.ranking_id == Ranking.id)
        .where(chosen, identical_battles(), *(rule for _, rule in rules), RankingItem.tier.is_not(None))
        .order_by(Ranking.id)
    )
    rows = session.execute(query).all()

    def battle(details: dict[str, Any]) -> tuple[list[int], float]:
        """(the two models' codes, the outcome); details that cannot be read (not two models, no verdict Arena
        writes) are a battle of no known model, left out and counted."""
        pair, winner = details.get(IDENTICAL), details.get("winner")
        named = isinstance(pair, list) and len(pair) == 2 and all(isinstance(m, str) for m in pair)
        if not named or winner not in WINNERS:
            return [-1, -1], 0.5
        return [index.setdefault(m, len(index)) for m in pair], WINNERS[winner]

    read = [battle(details) for _, _, details in rows]
    return [
        np.array([r for r, _, _ in rows], dtype=np.int64),
        np.array([c for _, c, _ in rows], dtype=np.int64),
        np.array([c for _, c, _ in rows], dtype=np.int64),
        np.array([outcome for _, outcome in read], dtype=np.float64),
        np.array([codes[0] for codes, _ in read], dtype=np.int64),
        np.array([codes[1] for codes, _ in read], dtype=np.int64),
    ]


def read_battles(session: Session, filters: Filters, *, with_candidates: bool = False) -> Battles:
    """Every battle of the rankings `filters` keeps, in ranking order, models numbered by name (`_by_name`).

    A battle's sides follow its replies' content hashes (`a` the smaller), which no order of storing
    changes, and which falls on either model as Chatbot Arena's random sides do (style control's features
    are centred, as FastChat's, on that). An identical battle keeps the dataset's sides.

    Args:
        with_candidates: keep each battle's two candidate ids (for style control).
    """
    ia, ib = aliased(RankingItem), aliased(RankingItem)
    ca, cb = aliased(Candidate), aliased(Candidate)
    va, vb = aliased(ModelVersion), aliased(ModelVersion)
    rules = filters.rules()
    query = (
        select(
            Ranking.id,
            ia.candidate_id,
            ib.candidate_id,
            ia.tier,
            ib.tier,
            ca.content_hash > cb.content_hash,
            func.coalesce(ia.model, va.name, ca.model),
            func.coalesce(ib.model, vb.name, cb.model),
        )
        .join(ia, ia.ranking_id == Ranking.id)
        .join(ib, and_(ib.ranking_id == Ranking.id, ib.candidate_id > ia.candidate_id))
        .join(ca, ca.id == ia.candidate_id)
        .join(cb, cb.id == ib.candidate_id)
        .outerjoin(va, va.id == ca.model_version_id)
        .outerjoin(vb, vb.id == cb.model_version_id)
        .where(filters.read(), *(rule for _, rule in rules), ia.tier.is_not(None), ib.tier.is_not(None))
        .order_by(Ranking.id, ia.candidate_id, ib.candidate_id)
    )
    filtered = _filtered_out(session, filters.read(), rules)
    index: dict[str, int] = {}  # model name -> its code, as first met
    parts = []
    for chunk in session.execute(query.execution_options(yield_per=CHUNK)).partitions():
        columns = list(zip(*chunk))  # a chunk at a time: a million rows as Python tuples would take ~0.5 GB
        ranking, *ints = [np.array(c, dtype=np.int64) for c in columns[:6]]
        names = [
            np.fromiter((-1 if m is None else index.setdefault(m, len(index)) for m in c), np.int64, len(c))
            for c in columns[6:]
        ]
        turn = ints.pop().astype(bool)
        pairs = [*zip(ints[0::2], ints[1::2]), names]  # (cand a, cand b), (tier a, tier b), (model a, model b)
        parts.append([ranking, *(part for x, y in pairs for part in (np.where(turn, y, x), np.where(turn, x, y)))])
    same_text = _identical_rows(session, filters.read(), rules, index)
    if not parts and not len(same_text[0]):
        none = empty()
        none.left_out = filtered
        return none
    if parts:
        ranking, cand_a, cand_b, tier_a, tier_b, la, lb = (np.concatenate(c) for c in zip(*parts))
        del parts
        outcome = np.where(tier_a < tier_b, 1.0, np.where(tier_a > tier_b, 0.0, 0.5))
    else:
        ranking = cand_a = cand_b = la = lb = np.zeros(0, dtype=np.int64)
        outcome = np.zeros(0)
    if len(same_text[0]):  # merged in ranking order, each ranking's battles as read
        columns = [np.concatenate(pair) for pair in zip((ranking, cand_a, cand_b, outcome, la, lb), same_text)]
        order = np.argsort(columns[0], kind="stable")
        ranking, cand_a, cand_b, outcome, la, lb = (c[order] for c in columns)
    unknown = (la < 0) | (lb < 0)
    same = ~unknown & (la == lb)
    keep = ~unknown & ~same
    left_out = dict(filtered)
    left_out.update(
        (reason, int(n))
        for reason, n in (
            ("a candidate of no known model", unknown.sum()),
            ("both candidates of one model", same.sum()),
        )
        if n
    )
    models, a, b = _by_name(list(index), la[keep], lb[keep])
    outcome = outcome[keep]
    group = np.unique(ranking[keep], return_inverse=True)[1].reshape(-1).astype(np.int64)
    candidates = np.stack([cand_a[keep], cand_b[keep]], axis=1) if with_candidates else None
    return Battles(models, a, b, outcome, group, candidates, left_out)


def _filtered_out(session: Session, chosen, rules: list[tuple[str, Any]]) -> dict[str, int]:
    """The battles of the rankings the filters leave out, by the first filter each fails: reason -> battles.

    A ranking of n ranked replies is n·(n−1)/2 battles (a battle of identical replies one), counted per
    ranking in SQL: no battle is read.
    """
    if not rules:
        return {}
    ranked = (
        select(RankingItem.ranking_id, func.count().label("n"))
        .where(RankingItem.tier.is_not(None))
        .group_by(RankingItem.ranking_id)
        .subquery()
    )
    # a battle of identical replies is one battle, of the ranking's one reply
    n = case((identical_battles(), 2), else_=ranked.c.n).label("n")
    failed = (
        select(case(*((not_(rule), k) for k, (_, rule) in enumerate(rules))).label("rule"), n)
        .join_from(Ranking, ranked, ranked.c.ranking_id == Ranking.id)
        .where(chosen, not_(and_(*(rule for _, rule in rules))))
        .subquery()
    )
    counts = session.execute(
        select(failed.c.rule, func.sum(failed.c.n * (failed.c.n - 1))).group_by(failed.c.rule).order_by(failed.c.rule)
    )
    return {rules[k][0]: int(twice) // 2 for k, twice in counts if twice}


def markdown_counts(text: str) -> tuple[int, int, int]:
    """(headers, list items, bold spans) in a reply, outside its code blocks, as FastChat counts them."""
    text = _CODE.sub("", text)
    return (
        len(_HEADER.findall(text)),
        len(_ORDERED.findall(text)) + len(_UNORDERED.findall(text)),
        sum(len(p.findall(text)) for p in _BOLD),
    )


def style_counts(session: Session, candidate_ids: np.ndarray) -> np.ndarray:
    """(len(ids), 4) counts of STYLE_FEATURES per candidate, in the order of `candidate_ids`.

    A reply of several turns is counted over its assistant turns, as FastChat does.
    """
    rows = lookup(session, Candidate.__table__, ["id", "text", "messages"], "id", [int(c) for c in candidate_ids])
    counts = {}
    for cid, text, messages in rows:
        if messages:
            text = "\n".join(m["content"] for m in messages if m.get("role") == "assistant")
        counts[cid] = (len(text), *markdown_counts(text))
    return np.array([counts[int(c)] for c in candidate_ids], dtype=np.float64).reshape(-1, len(STYLE_FEATURES))


def style_features(raw: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """FastChat's style covariates from (N, 2, 4) counts of a and b: (a − b) / (a + b + 1), standardised.

    A feature that never varies (no reply has a header) carries no information and
    would divide by zero: it is dropped. Returns (N, k) features and their names.
    """
    a, b = raw[:, 0, :], raw[:, 1, :]
    diff = (a - b) / (a + b + 1.0)
    std = diff.std(axis=0)
    kept = np.flatnonzero(std > 1e-12)
    features = (diff[:, kept] - diff[:, kept].mean(axis=0)) / std[kept]
    return features, [STYLE_FEATURES[c] for c in kept]
