"""Best-of-n sampling with a trained reward model (inference-time alignment).

For each prompt the policy samples N responses; the reward model scores them;
the highest-scoring one is kept (ties broken at random). All N are stored, so
`preflab bon estimate --from-db --proxy REWARD_MODEL` can later estimate every
n ≤ N from them, and a human or gold judge can rank them to measure the truth:

- each distinct response is a Candidate (the policy and sampling settings, the
  sequence's log-probability under the sampling distribution);
- the scores are one Ranking per prompt by the AI annotator named after the
  reward model's model version: tiers by score, `RankingItem.score` = reward,
  `details` = {"copies": how many of the N draws gave this text, "logprob",
  "selected"}. A response drawn twice is one candidate with two copies (the
  estimator counts it twice: identical draws are a point mass, not a mistake).

The N draws come from `preflab.training.bestofn.draw`, on the policy's engine (in this
process or on a server). Scoring comes from `preflab.lm.scoring` (inputs tokenized as the
reward model was trained on them), as `preflab judge reward-model` scores.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.db.ai_rankings import write_ai_ranking
from preflab.db.conversation import Messages, assistant_turn, stored_prompt
from preflab.db.models import OVERALL, Annotator, ModelVersion, Prompt, Ranking
from preflab.db.pairs.build import tiers_from_scores
from preflab.db.store import chunks, content_hash, ensure_annotators, ensure_candidates
from preflab.errors import InputError, NotFound
from preflab.lm.engines import Engine, Failed, Generation
from preflab.lm.names import NamedModel
from preflab.training.bestofn.config import BonSampleConfig
from preflab.training.bestofn.draw import batch_seed, draw

SOURCE = "bon"


def reward_reader(reward: NamedModel, config: BonSampleConfig):
    """(prompts, responses, group sizes) -> the reward model's score of each response: its one head's, or
    `config.head`'s of several, or its place among its group (a prompt's draws, `sizes` in order) by `config.combine`.
    """
    from preflab.db.export.heads import heads_reader
    from preflab.lm.loading import head_names
    from preflab.lm.scoring import reward_scores, reward_vectors

    model, tokenizer, size = reward.model, reward.tokenizer, config.batch_size
    names, count = head_names(model.config), model.config.num_labels
    read = heads_reader(names, count, config.head, config.combine, model=reward.label)
    if read is None:
        return lambda prompts, responses, sizes: reward_scores(model, tokenizer, prompts, responses, size)

    def score(prompts, responses, sizes: list[int]) -> list[float]:
        vectors, out, at = reward_vectors(model, tokenizer, prompts, responses, size), [], 0
        for n in sizes:  # a head reads each alone; a rule orders each prompt's draws together
            out += read(vectors[at : at + n])
            at += n
        return out

    return score


def reward_model_version(session: Session, name: str) -> ModelVersion:
    """The `reward` ModelVersion called `name`, with weights on disk."""
    version = session.scalar(select(ModelVersion).where(ModelVersion.name == name))
    if version is None:
        raise NotFound(f"no model version named {name!r} (see the model versions your training runs made)")
    if version.kind != "reward":
        raise InputError(f"model version {name!r} is a {version.kind} model, not a reward model")
    if not version.path:
        raise InputError(f"model version {name!r} has no saved weights (no path)")
    return version


@dataclass
class Selected:
    prompt_id: int
    candidate_id: int
    score: float
    mean_score: float
    logprob: float | None
    text: str


@dataclass
class BonSampleSummary:
    reward_model: str
    policy: str
    n: int
    prompts: int = 0  # prompts sampled by this call
    kept: int = 0  # prompts this exact run had already sampled
    samples: int = 0
    stored: int = 0  # new candidates
    duplicates: int = 0  # draws identical to another draw of the same prompt
    superseded: int = 0  # earlier best-of-n rankings by this reward model replaced
    quarantined: int = 0  # prompts a server refused for themselves (over its context length)
    failed: int = 0  # prompts with a draw left unanswered after every retry: sampled by the next run
    reasons: dict[str, int] = field(default_factory=dict)  # why, with how many draws each
    engine: dict | None = None  # a server's stats: requests, cache hits, tokens in/out, retries, errors, cost
    seconds: float = 0.0
    selected: list[Selected] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k != "selected"}
        out["selected"] = [asdict(s) for s in self.selected]
        return out


def run_id(policy: str, reward_model: str, config: BonSampleConfig) -> str:
    blob = json.dumps({"policy": policy, "reward_model": reward_model, **config.identity()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _prompts_to_sample(
    session: Session, run: str, prompt_ids: list[int] | None
) -> tuple[list[tuple[int, Messages]], int]:
    """(prompt id, its messages: the whole history) not yet sampled by this run, and how many were."""
    query = select(Prompt.id, Prompt.text, Prompt.messages).order_by(Prompt.id)
    parts = (
        [query]
        if prompt_ids is None
        else [query.where(Prompt.id.in_(part)) for part in chunks(sorted(set(prompt_ids)))]
    )
    rows = sorted(
        ((pid, stored_prompt(text, messages)) for part in parts for pid, text, messages in session.execute(part)),
        key=lambda row: row[0],
    )
    done = set(session.scalars(select(Ranking.external_id).where(Ranking.source == SOURCE, Ranking.judge_run == run)))
    todo = [(pid, turns) for pid, turns in rows if f"{run}:{pid}" not in done]
    return todo, len(rows) - len(todo)


def _store_prompt(
    session: Session,
    annotator_id: int,
    run: str,
    prompt_id: int,
    samples: list[Generation],
    scores: list[float],
    policy: str,
    policy_version_id: int | None,
    config: BonSampleConfig,
    seed: int,
    rng: random.Random,
    summary: BonSampleSummary,
) -> None:
    """Store one prompt's N draws as candidates and the reward model's ranking of them."""
    distinct: dict[str, dict[str, Any]] = {}
    for position, (sample, score) in enumerate(zip(samples, scores)):
        h = content_hash(sample.text)
        if h in distinct:
            distinct[h]["copies"] += 1
            summary.duplicates += 1
            continue
        distinct[h] = {"sample": sample, "score": score, "copies": 1, "position": position}
    settings = {k: v for k, v in config.identity().items() if k not in ("conversational", "n")}
    # A response drawn in an earlier run keeps the sampling record it was first stored with.
    ids = ensure_candidates(
        session,
        {
            (prompt_id, h): {
                "text": d["sample"].text,
                "model": policy,
                "model_version_id": policy_version_id,
                "sampling": {
                    **settings,
                    "seed": seed,
                    "best_of": config.n,
                    "logprob": d["sample"].logprob,
                    "tokens": d["sample"].tokens,
                    "finished": d["sample"].finished,
                },
            }
            for h, d in distinct.items()
        },
    )
    summary.stored += ids.created
    by_candidate = {ids[(prompt_id, h)]: d for h, d in distinct.items()}
    scored = {cid: d["score"] for cid, d in by_candidate.items()}
    top = max(scored.values())
    chosen = rng.choice(sorted(cid for cid, s in scored.items() if s == top))
    _, superseded = write_ai_ranking(
        session,
        annotator_id=annotator_id,
        prompt_id=prompt_id,
        source=SOURCE,
        external_id=f"{run}:{prompt_id}",
        run_id=run,
        tiers=tiers_from_scores(scored, tolerance=0.0),
        items=[
            {
                "candidate_id": cid,
                "shown_position": d["position"],
                "score": d["score"],
                "details": {"copies": d["copies"], "logprob": d["sample"].logprob, "selected": cid == chosen},
            }
            for cid, d in by_candidate.items()
        ],
        within_source=True,
        criterion=config.head or OVERALL,  # a rule's order is the one order: overall
    )
    summary.superseded += superseded
    best = by_candidate[chosen]
    summary.selected.append(
        Selected(prompt_id, chosen, best["score"], float(np.mean(scores)), best["sample"].logprob, best["sample"].text)
    )


def best_of_n(
    sessions: sessionmaker[Session],
    policy: Engine,
    reward: NamedModel,
    config: BonSampleConfig,
    prompt_ids: list[int] | None = None,
    reporter: Reporter = SILENT,
) -> BonSampleSummary:
    """Sample N responses per prompt, score them, keep the best; store everything.

    Each batch of prompts is one transaction, so an interrupted run keeps what it
    finished and a re-run of the same settings samples only the prompts left.

    Args:
        policy: the policy's engine (`preflab.lm.engines.open_engine`): its name and model version are
            stored on the candidates.
        reward: the loaded reward model; its label names the AI annotator of the rankings.
    """
    from preflab.lm.scoring import exchange

    score = reward_reader(reward, config)
    start = time.perf_counter()
    label, version_id = policy.name, policy.version_id  # resolved (recorded) before any transaction opens
    summary = BonSampleSummary(reward.label, label, config.n)
    run = run_id(label, reward.label, config)
    with sessions.begin() as session:
        key = ("ai", reward.label)
        known = session.scalar(select(Annotator.id).where(Annotator.kind == "ai", Annotator.name == reward.label))
        annotator_id = ensure_annotators(
            session, {key: {"judge_kind": "reward-model", "model": str(reward.location)[-300:]}}
        )[key]
        if known is None:  # JSON through the ORM, as for candidates
            session.execute(
                update(Annotator), [{"id": annotator_id, "config": {"model_version": reward.label, "use": "best-of-n"}}]
            )
        todo, summary.kept = _prompts_to_sample(session, run, prompt_ids)
    per_batch = max(1, config.batch_size // config.n)
    if policy.stores_answers:  # each draw a request: enough to a call to keep `concurrency` of them in flight
        per_batch = max(per_batch, 4 * policy.concurrency // config.n)
    reasons: Counter[str] = Counter()
    with reporter.progress("best-of-n", len(todo)) as advance:
        for batch in chunks(todo, per_batch):
            # The policy reads every message of the history, and the reward model scores each draw given that
            # history (plain text only for a lone user message).
            drawn, seeds = draw(policy, batch, config)
            for d in drawn:
                if isinstance(d, Failed):  # not stored: the prompt is sampled again by the next run
                    reasons[d.reason] += 1
                    summary.quarantined += d.quarantined
                    summary.failed += not d.quarantined
            kept = [(item, d, seed) for item, d, seed in zip(batch, drawn, seeds) if not isinstance(d, Failed)]
            inputs = [
                exchange(turns, assistant_turn(s.text), config.conversational)
                for (_, turns), samples, _ in kept
                for s in samples
            ]
            sizes = [len(samples) for _, samples, _ in kept]
            values = iter(score([p for p, _ in inputs], [r for _, r in inputs], sizes) if inputs else [])
            rng = random.Random(batch_seed(config.seed, [pid for pid, _ in batch]))
            with sessions.begin() as session:
                for (prompt_id, _), samples, drawn_with in kept:
                    scores = [round(next(values), 6) for _ in samples]
                    _store_prompt(
                        session,
                        annotator_id,
                        run,
                        prompt_id,
                        samples,
                        scores,
                        label,
                        version_id,
                        config,
                        drawn_with,
                        rng,
                        summary,
                    )
            summary.prompts += len(kept)
            summary.samples += sum(len(s) for _, s, _ in kept)
            advance(len(batch))
    summary.reasons = dict(reasons.most_common(10))
    summary.engine = policy.stats.as_dict() if policy.stores_answers else None
    summary.seconds = time.perf_counter() - start
    return summary
