"""The Goodhart frontier for real data: the model versions of a lineage, and best-of-n on the root.

For each model version from the root (the base model) to the named policy, its
stored samples (the candidates it wrote) give one point: the mean proxy reward
(the optimised reward model's judge scores), the mean true reward (held-out
human rankings, as each candidate's mean normalised Borda score, or another
judge's scores), the true-reward win rate over the root's samples of the same
prompts, and KL(π_v ‖ π_root) estimated by Monte Carlo from π_v's own samples:
the mean of log π_v(y|x) − log π_root(y|x), with its standard error. Best-of-n
on the root's samples (the unbiased estimator; its KL is the log n − (n−1)/n
bound) goes on the same chart.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import or_, select
from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.db.conversation import Messages, stored_prompt, stored_reply
from preflab.db.models import Candidate, ModelVersion, Prompt
from preflab.errors import InputError, NotFound
from preflab.training.goodhart.frontier import Point, findings, fit_methods


@dataclass
class VersionSamples:
    name: str
    location: str  # what `from_pretrained` loads
    samples: list[tuple[int, int, Messages, Messages]]  # (prompt id, candidate id, prompt, reply) as messages


def lineage(session: Session, name: str) -> list[ModelVersion]:
    """The model version `name` and its ancestors, the root first."""
    version = session.scalar(select(ModelVersion).where(ModelVersion.name == name))
    if version is None:
        raise NotFound(f"there is no model version {name!r}")
    chain = [version]
    while chain[-1].parent_id is not None and len(chain) < 1000:
        chain.append(session.get(ModelVersion, chain[-1].parent_id))
    return chain[::-1]


def version_samples(session: Session, version: ModelVersion, limit: int) -> VersionSamples:
    """The candidates a model version wrote (by version id, or by the name or path stored with them)."""
    labels = [label for label in (version.name, version.path) if label]
    rows = session.execute(
        select(Candidate.prompt_id, Candidate.id, Prompt.text, Prompt.messages, Candidate.text, Candidate.messages)
        .join(Candidate.prompt)
        .where(or_(Candidate.model_version_id == version.id, Candidate.model.in_(labels)))
        .order_by(Candidate.id)
        .limit(limit)
    ).all()
    return VersionSamples(
        version.name,
        version.path or version.base_model or version.name,
        [
            (pid, cid, stored_prompt(ptext, pturns), stored_reply(ctext, cturns))
            for pid, cid, ptext, pturns, ctext, cturns in rows
        ],
    )


def mc_kl(
    policy: str, reference: str, samples: list[tuple[int, int, Messages, Messages]], chat: bool, batch_size: int
) -> tuple[float, float]:
    """KL(π ‖ π_ref) from π's own samples: the mean log-ratio and its standard error.

    A sample of a conversation is scored given its whole history (the chat template), `chat` or not.
    """
    from preflab.lm.loading import load_causal_lm
    from preflab.lm.scoring import completion_logprobs, exchange

    inputs = [exchange(prompt, reply, chat) for _, _, prompt, reply in samples]
    prompts, answers = [p for p, _ in inputs], [r for _, r in inputs]
    logps = []
    for location in (policy, reference):
        model, tokenizer = load_causal_lm(location)
        logps.append(np.array(completion_logprobs(model, tokenizer, prompts, answers, batch_size)))
        del model
    ratio = logps[0] - logps[1]
    stderr = float(ratio.std(ddof=1) / np.sqrt(ratio.size)) if ratio.size > 1 else 0.0
    return float(ratio.mean()), stderr


def _win_rate(mine: dict[int, list[float]], theirs: dict[int, list[float]]) -> float | None:
    """P(true(y) > true(y')) + ½ P(=), y from `mine`, y' from `theirs`, on the prompts both have."""
    rates = []
    for prompt, values in mine.items():
        other = np.array(theirs.get(prompt, []))
        if other.size:
            a = np.array(values)[:, None]
            rates.append(float(((a > other) + 0.5 * (a == other)).mean()))
    return float(np.mean(rates)) if rates else None


def lineage_frontier(
    sessions: sessionmaker[Session],
    policy: str,
    proxy: str,
    true: str,
    out: str | Path,
    chat: bool = True,
    ns: str = "pow2",
    limit: int = 2000,
    batch_size: int = 8,
    reporter: Reporter = SILENT,
) -> dict[str, Any]:
    """Points, fits, findings and the chart for the lineage of `policy`, scored by `proxy` and `true`.

    Args:
        proxy: the AI annotator (a reward model's judge) that was optimised.
        true: another annotator, or "human" (held-out human rankings).
        chat: the samples were written through the chat template (as `preflab generate` does).
        limit: at most this many samples per model version.
    """
    from preflab.training.bestofn.estimator import estimate
    from preflab.training.bestofn.jobs import parse_ns
    from preflab.training.bestofn.sources import HUMAN, annotator_values, human_values
    from preflab.training.goodhart.chart import frontier_chart

    with sessions.begin() as session:
        versions = [version_samples(session, v, limit) for v in lineage(session, policy)]
        proxy_values, _, _ = annotator_values(session, proxy)
        true_values = human_values(session) if true == HUMAN else annotator_values(session, true)[0]
    if len(versions) < 2:
        raise InputError(f"{policy} has no parent model version: a lineage needs at least two")

    def scored(v: VersionSamples) -> list[tuple[int, int, Messages, Messages]]:
        return [s for s in v.samples if s[1] in proxy_values.get(s[0], {}) and s[1] in true_values.get(s[0], {})]

    root = versions[0]
    root_true: dict[int, list[float]] = {}
    for prompt, cid, _, _ in scored(root):
        root_true.setdefault(prompt, []).append(true_values[prompt][cid])
    points: list[Point] = []
    for v in versions:
        rows = scored(v)
        if not rows:
            reporter.note(f"{v.name}: no samples scored by both {proxy} and {true}; left out")
            continue
        mine: dict[int, list[float]] = {}
        for prompt, cid, _, _ in rows:
            mine.setdefault(prompt, []).append(true_values[prompt][cid])
        kl, stderr = (0.0, 0.0) if v is root else mc_kl(v.location, root.location, rows, chat, batch_size)
        points.append(
            Point(
                "lineage",
                v.name,
                max(kl, 0.0),
                float(np.mean([proxy_values[p][c] for p, c, _, _ in rows])),
                float(np.mean([true_values[p][c] for p, c, _, _ in rows])),
                _win_rate(mine, root_true),
                kl_stderr=stderr,
                model_version=v.name,
            )
        )
        reporter.note(f"{v.name}: {len(rows):,} samples, KL {kl:.3f} ± {stderr:.3f}")
    groups = {}
    for prompt, cid, _, _ in scored(root):
        groups.setdefault(prompt, []).append((proxy_values[prompt][cid], true_values[prompt][cid]))
    if groups:
        largest = max(len(g) for g in groups.values())
        est = estimate(
            [(np.array([p for p, _ in g]), np.array([t for _, t in g])) for g in groups.values()], parse_ns(ns, largest)
        )
        points += [
            Point("best-of-n", f"n={n}", kl, proxy_mean, true_mean, win)
            for n, kl, proxy_mean, true_mean, win in zip(est.n, est.kl_bound, est.proxy, est.true, est.true_win)
        ]
    if not points or points[0].setting != root.name:
        raise InputError(f"the root model {root.name} has no samples scored by both {proxy} and {true}")
    baseline = points[0].true
    fits = fit_methods(points, baseline)
    chart = frontier_chart(points, fits, baseline, out, title=f"Lineage of {policy}")
    return {
        "points": [p.as_dict() for p in points],
        "fits": {m: f.as_json() if f else None for m, f in fits.items()},
        "findings": findings(points, baseline),
        "chart": str(chart),
        "proxy": proxy,
        "true": true,
        "lineage": [v.name for v in versions],
    }
