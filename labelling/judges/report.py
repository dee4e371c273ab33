"""`preflab judge report`: how far each judge can be trusted.

Per judge (AI annotator): swap consistency, first-position preference and
position bias (pairwise judges: the share of pairs whose verdict followed the
position, the same place winning in both orders), parse-failure rate (sampled
score and reference judges), the probability mass the score tokens take
(expected score judges: a low mass means the judge is guessing), time per
candidate, length bias (correlation of score with response length; how often
the longer response is ranked above the shorter), and agreement with human
rankings on the prompts both ranked. Judges of one kind run by different
methods on the same rankings (the sample rankings of `preflab import rankings`)
line up side by side. `trust.py` turns these into "which judge to trust".

A judge is measured per criterion (`Ranking.criterion`): one row per judge and criterion it
ranked by, each from that criterion's rankings only and compared with people's rankings of the
same criterion. A judge may be trusted for helpfulness and not for harmlessness.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from itertools import combinations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from preflab.db.models import OVERALL, Annotator, Candidate, Ranking, RankingItem, RankingStatus
from preflab.db.pairs.views import by_criterion, iter_prompt_rankings
from preflab.db.quality.agreement import compare_rankings
from preflab.labelling.judges.table import JUDGE_KINDS, JUDGES

# Below this share of the next-token probability on the score tokens, an expected-score judge
# would mostly not have answered with a score at all: its score is a guess.
LOW_MASS = 0.5


@dataclass
class _Tally:
    rankings: set = field(default_factory=set)
    prompts: set = field(default_factory=set)
    sources: set = field(default_factory=set)  # the rankings' sources ("import:ultrafeedback")
    tiers: dict = field(default_factory=lambda: defaultdict(dict))  # ranking id -> {candidate: tier}
    prompt_of: dict = field(default_factory=dict)  # ranking id -> prompt id
    scored: list = field(default_factory=list)  # (score, length)
    lengths: dict = field(default_factory=dict)  # candidate -> length
    pair_entries: int = 0
    consistent: int = 0
    first_won: int = 0
    first_both: int = 0  # shown first, won in both orders
    second_both: int = 0  # shown second, won in both orders
    attempts: int = 0
    failures: int = 0
    masses: list = field(default_factory=list)  # expected score: mass on the score tokens
    abstentions: int = 0  # pair entries / candidates with no readable reply
    pairs_ranked: int = 0  # candidate pairs its rankings order
    seen: dict = field(default_factory=dict)  # ranking id -> its candidates read so far
    seconds: list = field(default_factory=list)  # judging time per candidate


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _method(judge: Annotator) -> str | None:
    """How a judge of a kind with several methods graded (judges from before `method` existed sampled)."""
    if judge.judge_kind not in JUDGES or not hasattr(JUDGES[judge.judge_kind].config, "method"):
        return None
    return (judge.config or {}).get("method", "sampled")


def _pearson(points: list[tuple[float, float]]) -> float | None:
    if len(points) < 3:
        return None
    import numpy as np

    xs, ys = np.array(points, dtype=float).T
    if xs.std() == 0 or ys.std() == 0:
        return None
    return float(np.corrcoef(xs, ys)[0, 1])


def _collect(
    session: Session, annotator_ids: list[int], ranking_ids: list[int] | None = None, criterion: str | None = None
) -> dict[tuple[int, str], _Tally]:
    """Each judge's tallies over its valid rankings, by (judge, criterion), and what it could not read in its
    abstentions too (`skipped` judge rankings: replies it read nothing from count as parse failures and
    abstentions); `ranking_ids`: only those rankings (one run's); `criterion`: only that criterion's."""
    tallies: dict[tuple[int, str], _Tally] = defaultdict(_Tally)
    wanted = None if ranking_ids is None else set(ranking_ids)
    query = (
        select(
            Ranking.annotator_id,
            Ranking.criterion,
            Ranking.id,
            Ranking.prompt_id,
            Ranking.source,
            RankingItem.candidate_id,
            RankingItem.tier,
            RankingItem.score,
            RankingItem.details,
            func.length(Candidate.text),
            Ranking.status,
        )
        .join(RankingItem, RankingItem.ranking_id == Ranking.id)
        .join(Candidate, Candidate.id == RankingItem.candidate_id)
        .where(
            Ranking.status.in_([RankingStatus.valid.value, RankingStatus.skipped.value]),
            Ranking.annotator_id.in_(annotator_ids),
        )
        .execution_options(yield_per=10_000)
    )
    if criterion is not None:
        query = query.where(Ranking.criterion == criterion)
    if wanted is not None:  # one run's rankings: their id range, then the ids themselves
        query = query.where(Ranking.id.between(min(wanted, default=0), max(wanted, default=-1)))
    # Core rows, not ORM ones: 80,000 imported ranking items are read in 0.3 s here, 0.9 s through the ORM.
    rows = session.connection().execute(query)
    for annotator_id, named, ranking_id, prompt_id, source, cid, tier, score, details, length, status in rows:
        if wanted is not None and ranking_id not in wanted:
            continue
        t = tallies[(annotator_id, named)]
        if status != RankingStatus.valid.value:  # an abstention (a judge's only): what it could not read
            if source == "judge":
                _count_unread(t, details or {})
            continue
        seen = t.seen.setdefault(ranking_id, 0)
        t.pairs_ranked += seen  # the ranking's candidates so far, each a pair with this one
        t.seen[ranking_id] = seen + 1
        t.rankings.add(ranking_id)
        t.prompts.add(prompt_id)
        t.sources.add(source)
        t.prompt_of[ranking_id] = prompt_id
        t.lengths[cid] = length
        if tier is not None:
            t.tiers[ranking_id][cid] = tier
        if score is not None:
            t.scored.append((score, length))
        details = details or {}
        for entry in details.get("pairs", []):
            if entry.get("outcome") == "abstain":  # a reply that could not be read: no verdict to measure
                t.abstentions += 1
                continue
            t.pair_entries += 1
            t.consistent += entry.get("outcome") != "tie"
            p_a, p_b = entry.get("p_as_a", 0.5), entry.get("p_as_b", 0.5)
            t.first_won += p_a > 0.5
            t.first_both += p_a > 0.5 > p_b
            t.second_both += p_a < 0.5 < p_b
        _count_unread(t, details, pairs=False)
        if "mass" in details:
            t.masses.append(details["mass"])
        if "seconds" in details:
            t.seconds.append(details["seconds"])
    return tallies


def _count_unread(t: _Tally, details: dict, pairs: bool = True) -> None:
    """A candidate's attempts, parse failures and abstentions (its pairs' too, where `pairs`)."""
    if pairs:
        t.abstentions += sum(entry.get("outcome") == "abstain" for entry in details.get("pairs", []))
    t.attempts += details.get("attempts", 0)
    t.failures += details.get("parse_failures", 0)
    t.abstentions += 2 * bool(details.get("abstain"))  # two per candidate, as a pair's are counted


def _costs(t: _Tally, engine: dict | None, pairs_ranked: int) -> dict:
    """What the judge's runs cost (stored with its annotator by runs on a server) per 1,000 candidate pairs
    its rankings order (`pairs_ranked`: of every criterion, as its runs' cost is), and how many pairs a second
    its judging time ranked (the time in its details)."""
    seconds = sum(t.seconds)
    cost = engine.get("cost") if engine else None
    return {
        "engine": engine,
        "pairs_ranked": t.pairs_ranked,
        "pairs_per_s": t.pairs_ranked / seconds if seconds > 0 and t.pairs_ranked else None,
        "cost_per_1000_pairs": 1000 * cost / pairs_ranked if cost is not None and pairs_ranked else None,
    }


def _longer_wins(t: _Tally) -> tuple[int, float | None]:
    n = wins = 0
    for tiers in t.tiers.values():
        for a, b in combinations(tiers, 2):
            if tiers[a] == tiers[b] or t.lengths[a] == t.lengths[b]:
                continue
            n += 1
            better, worse = (a, b) if tiers[a] < tiers[b] else (b, a)
            wins += t.lengths[better] > t.lengths[worse]
    return n, (wins / n if n else None)


def _as_tiers(tiers: dict[int, int]) -> list[list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for cid, tier in tiers.items():
        out[tier].append(cid)
    return [sorted(out[k]) for k in sorted(out)]


def _human_agreement(
    session: Session, tallies: dict[tuple[int, str], _Tally], per_prompt: bool = False
) -> dict[tuple[int, str], dict]:
    """Each (judge, criterion) against every person's ranking of the same prompt and criterion."""
    wanted = {p for t in tallies.values() for p in t.prompts}
    humans: dict[tuple[int, str], list[list[list[int]]]] = {}
    for prompt_id, views in iter_prompt_rankings(session, "human"):
        if prompt_id in wanted:
            for name, same in by_criterion(views).items():
                humans[(prompt_id, name)] = [v.tiers for v in same]
    out = {}
    for (annotator_id, criterion), t in tallies.items():
        prompts, shared, agree, taus = set(), 0, 0, []
        counts: dict[int, list[int]] = defaultdict(lambda: [0, 0])  # prompt id -> [shared, agreeing] pairs
        for ranking_id, tiers in t.tiers.items():
            prompt_id = t.prompt_of[ranking_id]
            for human in humans.get((prompt_id, criterion), []):
                n, a, tau = compare_rankings(_as_tiers(tiers), human)
                prompts.add(prompt_id)
                shared, agree = shared + n, agree + a
                counts[prompt_id][0] += n
                counts[prompt_id][1] += a
                if tau is not None:
                    taus.append(tau)
        out[(annotator_id, criterion)] = {
            "prompts": len(prompts),
            "shared_pairs": shared,
            "pairwise_agreement": agree / shared if shared else None,
            "kendall_tau": sum(taus) / len(taus) if taus else None,
        }
        if per_prompt:  # a prompt's pairs depend on each other: a bootstrap resamples prompts, not pairs
            out[(annotator_id, criterion)]["per_prompt"] = [counts[p] for p in sorted(counts) if counts[p][0]]
    return out


def judge_report(
    session: Session,
    annotator_ids: list[int] | None = None,
    per_prompt: bool = False,
    imported: bool = False,
    ranking_ids: list[int] | None = None,
    criterion: str | None = OVERALL,
) -> list[dict]:
    """One dict of trust measures per judge (AI annotator with a judge kind) and criterion, oldest judge first,
    then by criterion ("criterion").

    Args:
        criterion: measure the rankings of this criterion only: one row per judge (one that ranked nothing
            by it: a row with nothing in it). None: a row per judge and criterion it ranked by (a judge that
            ranked nothing: one row, of `overall`), as the trust table (`trust.judge_trust`) shows them.
        ranking_ids: measure only these rankings (one run's, so a shard's summary counts its own pairs, not
            the judge's whole history); "scope" says which ("this run" or "all runs").
        per_prompt: also give, under "human_agreement", "per_prompt": the [shared, agreeing]
            pair counts of each prompt the judge shares with people (for `trust.judge_trust`'s interval).
        imported: every AI annotator, those whose rankings were imported too (GPT-4's UltraFeedback
            ratings): kind "import", no run, no position measures (their verdicts' order was not kept);
            "source" (the rankings' sources, "import:ultrafeedback") tells one import from another.
    """
    query = select(Annotator).where(Annotator.kind == "ai").order_by(Annotator.id)
    if not imported:
        query = query.where(Annotator.judge_kind.in_(JUDGE_KINDS))
    if annotator_ids is not None:
        query = query.where(Annotator.id.in_(annotator_ids))
    judges = list(session.scalars(query))
    tallies = _collect(session, [j.id for j in judges], ranking_ids, criterion) if judges else {}
    agreement = _human_agreement(session, tallies, per_prompt) if tallies else {}
    nobody = {"prompts": 0, "shared_pairs": 0, "pairwise_agreement": None, "kendall_tau": None}
    out = []
    for judge in judges:
        mine = sorted(name for aid, name in tallies if aid == judge.id) or [criterion or OVERALL]
        # The runs' cost is the judge's, over the pairs of every criterion it ranked.
        pairs_ranked = sum(tallies[(judge.id, name)].pairs_ranked for name in mine if (judge.id, name) in tallies)
        for name in mine:
            human = agreement.get((judge.id, name), nobody | ({"per_prompt": []} if per_prompt else {}))
            scope = "all runs" if ranking_ids is None else "this run"
            out.append(_row(judge, name, tallies.get((judge.id, name), _Tally()), human, scope, pairs_ranked))
    return out


def _row(judge: Annotator, criterion: str, t: _Tally, human: dict, scope: str, pairs_ranked: int) -> dict:
    """One judge's measures in one criterion; `human`: its agreement with people in that criterion."""
    n_longer, longer = _longer_wins(t)
    return {
        "judge": judge.name,
        "annotator_id": judge.id,
        "criterion": criterion,
        "pseudonym": judge.pseudonym,
        # An AI annotator that preflab did not run (an import) has judge kind "import" (or none: said "import").
        "kind": judge.judge_kind or "import",
        "imported": judge.judge_kind not in JUDGE_KINDS,
        "model": judge.model,
        "run_id": (judge.config or {}).get("run_id"),
        "source": ", ".join(sorted(t.sources)) or None,
        "rankings": len(t.rankings),
        "prompts": len(t.prompts),
        "swap_consistency": t.consistent / t.pair_entries if t.pair_entries else None,
        "first_position_rate": t.first_won / t.pair_entries if t.pair_entries else None,
        # Verdicts that followed the position (the same place won in both orders): None for
        # judges that score each reply alone, where the position cannot matter.
        "position_bias": (t.first_both + t.second_both) / t.pair_entries if t.pair_entries else None,
        "position_first": t.first_both / t.pair_entries if t.pair_entries else None,
        "position_second": t.second_both / t.pair_entries if t.pair_entries else None,
        "pairs_judged": t.pair_entries // 2,
        "parse_failure_rate": t.failures / t.attempts if t.attempts else None,
        "score_attempts": t.attempts,
        "method": _method(judge),
        "seconds_per_candidate": _mean(t.seconds),
        "score_mass": _mean(t.masses),
        "low_mass_rate": sum(m < LOW_MASS for m in t.masses) / len(t.masses) if t.masses else None,
        "guessing": None if not t.masses else _mean(t.masses) < LOW_MASS,
        "length_correlation": _pearson(t.scored),
        "longer_wins": longer,
        "length_pairs": n_longer,
        "human_agreement": human,
        "abstentions": t.abstentions // 2,
        "scope": scope,
        **_costs(t, (judge.config or {}).get("engine"), pairs_ranked),
    }
