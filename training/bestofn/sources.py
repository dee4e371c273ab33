"""Where best-of-n samples come from: a JSON Lines file, or the database's scores and rankings.

A group is one prompt's samples: (name, proxy rewards, true rewards or None).

From the database, a proxy is an AI annotator's (judge's or reward model's)
`RankingItem.score` on its valid rankings, averaged per candidate when it scored
a candidate more than once. The true reward is another annotator's scores the
same way, or, for `human`, each candidate's mean normalised Borda score over the
prompt's valid human rankings (`preflab.db.pairs.build.borda`): the share of the other
ranked candidates it beat, ties counting ½, averaged over the humans who ranked
it — 1 means every human put it first, 0 last. Borda is used rather than
Bradley–Terry because it is defined from a single ranking, needs no fit, and
keeps ties as ties. An annotator whose rankings carry no scores (tiers only) is
read the same way, by Borda over its own rankings. Only candidates with both a
proxy and a true value count. A proxy ranking item whose details say
{"copies": k} (`bon sample` writes it when the policy drew one response k
times) counts as k samples: repeated draws are part of the distribution.

Both are read within one criterion (`Ranking.criterion`, `overall` unless asked): the
human reference is the Borda consensus of people's rankings of that criterion, never a
mixture of helpfulness and harmlessness orders.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from preflab.db.models import OVERALL, Annotator, Ranking, RankingItem, RankingStatus
from preflab.db.pairs.build import borda
from preflab.db.pairs.views import iter_prompt_rankings
from preflab.errors import InputError, NotFound

Group = tuple[str, np.ndarray, np.ndarray | None]
HUMAN = "human"


def _number(value, what: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{where}: '{what}' must be a finite number, not {json.dumps(value)}")
    return float(value)


def read_jsonl(path: str | Path) -> list[Group]:
    """Groups from JSON Lines: {"group": "prompt-17", "proxy": 0.83, "true": 1.0} per sample.

    `group` is optional (one group), `true` is optional but then absent from every line.
    The file is read as every preflab reader reads one (`preflab.db.ingest.lines`: gzip read
    through, a byte-order mark and CRLF endings ignored); an analysis needs every
    sample, so a line that cannot be used stops it with one sentence naming the line.
    """
    from preflab.db.ingest.lines import open_input, read_lines
    from preflab.db.ingest.records import load_object
    from preflab.errors import Invalid

    path = Path(path)
    proxies: dict[str, list[float]] = defaultdict(list)
    trues: dict[str, list[float]] = defaultdict(list)
    with_true: bool | None = None
    with open_input(path) as handle:
        for line in read_lines(handle, path):
            if line.blank:
                continue
            where = f"{path.name}, line {line.number}"
            try:
                data = load_object(line.text())
            except Invalid as exc:
                reason = str(exc)
                raise InputError(
                    f"{where} is {reason}" if reason.startswith("not ") else f"{where}: {reason}"
                ) from None
            if "proxy" not in data:
                raise InputError(f"{where} has no 'proxy'")
            group = data.get("group", "")
            if not isinstance(group, (str, int)) or isinstance(group, bool):
                raise InputError(f"{where}: 'group' must be a string or an integer")
            has_true = data.get("true") is not None
            if with_true is None:
                with_true = has_true
            elif has_true != with_true:
                raise InputError(
                    f"{where} {'has' if has_true else 'lacks'} 'true' but line(s) before it "
                    f"{'do not' if has_true else 'do'}: give it for every sample or none"
                )
            proxies[str(group)].append(_number(data["proxy"], "proxy", where))
            if has_true:
                trues[str(group)].append(_number(data["true"], "true", where))
    if not proxies:
        raise InputError(f"{path} holds no samples")
    return [(g, np.array(p), np.array(trues[g]) if with_true else None) for g, p in proxies.items()]


@dataclass
class DbSummary:
    proxy: str
    true: str | None
    proxy_values: str  # "score" or "borda"
    true_values: str | None
    prompts: int
    samples: int  # candidates, each counted once per draw it stands for


def _annotator(session: Session, name: str) -> Annotator:
    found = session.scalars(select(Annotator).where(Annotator.name == name)).all()
    if not found:
        raise NotFound(f"no annotator named {name!r}")
    # An AI judge or reward model is what gets optimised; prefer it over a same-named human.
    return sorted(found, key=lambda a: a.kind != "ai")[0]


def annotator_values(
    session: Session, name: str, criterion: str = OVERALL
) -> tuple[dict[int, dict[int, float]], str, dict[int, int]]:
    """prompt id → candidate id → value, from one annotator's valid rankings of `criterion`; "score"|"borda";
    copies.

    copies: candidate id → how many draws it stands for, where a ranking item records it.
    """
    annotator = _annotator(session, name)
    rows = session.execute(
        select(
            Ranking.prompt_id,
            Ranking.id,
            RankingItem.candidate_id,
            RankingItem.tier,
            RankingItem.score,
            RankingItem.details,
        )
        .join(RankingItem, RankingItem.ranking_id == Ranking.id)
        .where(
            Ranking.annotator_id == annotator.id,
            Ranking.status == RankingStatus.valid.value,
            Ranking.criterion == criterion,
        )
        .order_by(Ranking.prompt_id, Ranking.id, RankingItem.tier, RankingItem.candidate_id)
    ).all()
    if not rows:
        raise NotFound(f"annotator {name!r} has no valid rankings" + _of_criterion(session, annotator, criterion))
    copies: dict[int, int] = {}
    for r in rows:
        k = r.details.get("copies") if isinstance(r.details, dict) else None
        if isinstance(k, int) and not isinstance(k, bool) and k > 1:
            copies[r.candidate_id] = max(copies.get(r.candidate_id, 1), k)
    scored = [r for r in rows if r.score is not None and math.isfinite(r.score)]
    if scored:
        sums: dict[int, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for r in scored:
            sums[r.prompt_id][r.candidate_id].append(r.score)
        return {p: {c: float(np.mean(v)) for c, v in cands.items()} for p, cands in sums.items()}, "score", copies
    by_prompt: dict[int, dict[int, dict[int, list[int]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in rows:
        if r.tier is not None:
            by_prompt[r.prompt_id][r.id][r.tier].append(r.candidate_id)
    return (
        {
            p: borda([[tiers[t] for t in sorted(tiers)] for tiers in rankings.values()])
            for p, rankings in by_prompt.items()
        },
        "borda",
        copies,
    )


def _of_criterion(session: Session, annotator: Annotator, criterion: str) -> str:
    """` of criterion 'x' (its criteria: …)` where the annotator ranked by other criteria only; else nothing."""
    others = session.scalars(
        select(Ranking.criterion)
        .where(Ranking.annotator_id == annotator.id, Ranking.status == RankingStatus.valid.value)
        .distinct()
        .order_by(Ranking.criterion)
    ).all()
    return f" of criterion {criterion!r} (its criteria: {', '.join(others)})" if others else ""


def human_values(session: Session, criterion: str = OVERALL) -> dict[int, dict[int, float]]:
    """prompt id → candidate id → mean normalised Borda score over the prompt's human rankings of `criterion`."""
    out = {}
    for prompt, views in iter_prompt_rankings(session, "human"):
        same = [v.tiers for v in views if v.criterion == criterion]
        if same:
            out[prompt] = borda(same)
    return out


def db_groups(
    session: Session, proxy: str, true: str | None = None, criterion: str = OVERALL
) -> tuple[list[Group], DbSummary]:
    """One group per prompt: the candidates with a proxy value (and a true value, if asked), both of `criterion`."""
    proxy_values, proxy_kind, copies = annotator_values(session, proxy, criterion)
    true_values, true_kind = None, None
    if true == HUMAN:
        true_values, true_kind = human_values(session, criterion), "borda"
    elif true is not None:
        true_values, true_kind, _ = annotator_values(session, true, criterion)
    groups: list[Group] = []
    samples = 0
    for prompt_id in sorted(proxy_values):
        scores = proxy_values[prompt_id]
        truth = None if true_values is None else true_values.get(prompt_id, {})
        ids = sorted(scores if truth is None else set(scores) & set(truth))
        if not ids:
            continue
        ids = [c for c in ids for _ in range(copies.get(c, 1))]
        groups.append(
            (
                str(prompt_id),
                np.array([scores[c] for c in ids]),
                None if truth is None else np.array([truth[c] for c in ids]),
            )
        )
        samples += len(ids)
    if not groups:
        raise InputError(f"no candidate has both a {proxy!r} value and a {true!r} value")
    return groups, DbSummary(proxy, true, proxy_kind, true_kind, len(groups), samples)
