"""The Optimisation section: best-of-n curves from `bon sample`'s draws, and self-rewarding iterations.

Best-of-n: for each reward model whose draws are stored (rankings of source
"bon"), the unbiased estimator of `preflab bon estimate` gives the expected
proxy reward of the best of n draws for every n up to the draws per prompt, and,
where people ranked the same candidates, the true reward (their mean Borda
score). Self-rewarding: `preflab self-reward report`'s rows, one per iteration.
This module also draws the section's two charts, with `charts`' figure and style.
"""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import exists, func, select
from sqlalchemy.orm import Session, aliased

from preflab.db.models import Annotator, Ranking, RankingStatus, SelfRewardIteration
from preflab.errors import InputError
from preflab.report.charts import SOURCE_COLOURS, _figure, _styled, to_svg
from preflab.report.privacy import ai_label, model_label
from preflab.training.bestofn.estimator import estimate
from preflab.training.bestofn.sample import SOURCE as BON_SOURCE
from preflab.training.bestofn.sources import HUMAN, db_groups
from preflab.training.selfreward.report import loop_report


def _ns(largest: int) -> list[int]:
    """1, 2, 4, … and the largest n itself."""
    ns = [1 << i for i in range(largest.bit_length()) if 1 << i <= largest]
    return ns if ns[-1] == largest else [*ns, largest]


def _people_ranked(session: Session, annotator_id: int) -> bool:
    """Did a person rank any prompt this reward model drew best-of-n samples for?"""
    bon, person = aliased(Ranking), aliased(Ranking)
    valid = RankingStatus.valid.value
    return bool(
        session.scalar(
            select(
                exists().where(
                    bon.annotator_id == annotator_id,
                    bon.source == BON_SOURCE,
                    bon.status == valid,
                    person.prompt_id == bon.prompt_id,
                    person.status == valid,
                    person.annotator_id == Annotator.id,
                    Annotator.kind == "human",
                )
            )
        )
    )


def bon_curves(session: Session) -> list[dict[str, Any]]:
    """One curve per reward model with stored best-of-n draws."""
    drawn = session.execute(
        select(Ranking.annotator_id, func.count())
        .where(Ranking.source == BON_SOURCE, Ranking.status == RankingStatus.valid.value)
        .group_by(Ranking.annotator_id)
        .order_by(Ranking.annotator_id)
    ).all()
    out = []
    for annotator_id, _ in drawn:
        annotator = session.get(Annotator, annotator_id)
        truth = HUMAN if _people_ranked(session, annotator_id) else None
        try:
            groups, summary = db_groups(session, annotator.name, truth)
        except InputError:  # people ranked other candidates of those prompts than the draws
            groups, summary = db_groups(session, annotator.name)
            truth = None
        largest = max(proxy.size for _, proxy, _ in groups)
        result = estimate([(proxy, true) for _, proxy, true in groups], _ns(largest))
        version = (annotator.config or {}).get("model_version")
        out.append(
            {
                "reward_model": model_label(version) if version else ai_label(annotator.name),
                "prompts": summary.prompts,
                "samples": summary.samples,
                "draws_per_prompt": largest,
                "true": "people (mean Borda)" if truth else None,
                "n": result.n,
                "proxy": result.proxy,
                "proxy_stderr": result.proxy_stderr,
                "true_values": result.true if truth else None,
                "kl_bound": result.kl_bound,
            }
        )
    return out


def self_reward_loops(session: Session) -> list[dict[str, Any]]:
    """Every loop's iterations: win rate against the parent, the judge's agreement with people."""
    loops = []
    for loop in session.scalars(select(SelfRewardIteration.loop).distinct().order_by(SelfRewardIteration.loop)):
        rows = []
        for r in loop_report(session, loop):
            pairs = r["pairs"] or {}
            agreement = r["judge_agreement"]
            rows.append(
                {
                    "iteration": r["iteration"],
                    "step": r["step"],
                    "parent": model_label(r["parent"]),
                    "model": model_label(r["model_version"]) if r["model_version"] else None,
                    "dataset": r["dataset_version"],
                    "prompts": r["prompts"],
                    "candidates": r["candidates"],
                    "judge_pairs": pairs.get("judge", 0),
                    "human_pairs": pairs.get("human", 0),
                    "win_rate": r["win_rate"],
                    "wins": r["wins"],
                    "losses": r["losses"],
                    "ties": r["ties"],
                    "eval_prompts": r["eval_prompts"],
                    "dpo_accuracy": r["dpo_heldout_reward_accuracy"],
                    "judge_agreement": agreement["pairwise_agreement"],
                    "judge_shared_pairs": agreement["shared_pairs"],
                }
            )
        loops.append({"loop": loop, "iterations": rows})
    return loops


def optimisation_section(session: Session) -> dict[str, Any]:
    """Best-of-n curves and self-rewarding loops (empty lists where there are none)."""
    return {"bon": bon_curves(session), "self_reward": self_reward_loops(session)}


@_styled
def bon_chart(curves: list[dict[str, Any]]) -> str:
    """Expected reward of the best of n draws against n: the proxy (reward model), and people where they ranked."""
    with_true = [c for c in curves if c["true_values"]]
    fig = _figure(9.5 if with_true else 6.0, 3.2)
    axes = fig.subplots(1, 2 if with_true else 1)
    axes = list(axes) if with_true else [axes]
    for i, curve in enumerate(curves):
        colour = SOURCE_COLOURS[i % len(SOURCE_COLOURS)]
        axes[0].plot(curve["n"], curve["proxy"], "o-", color=colour, label=curve["reward_model"], markersize=4)
        if with_true and curve["true_values"]:
            axes[1].plot(
                curve["n"], curve["true_values"], "s--", color=colour, label=curve["reward_model"], markersize=4
            )
    axes[0].set_title("Proxy reward of the best of n")
    axes[0].set_ylabel("reward model score")
    if with_true:
        axes[1].set_title("True reward of the best of n (people)")
        axes[1].set_ylabel("mean Borda score")
    ns = sorted({n for curve in curves for n in curve["n"]})
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.minorticks_off()
        ax.set_xlabel("n (draws per prompt)")
        ax.legend(fontsize=8)
    return to_svg(fig, "bon")


@_styled
def self_reward_chart(loops: list[dict[str, Any]]) -> str:
    """Per iteration: the win rate of M_t against M_{t-1}, and the judge's agreement with people."""
    fig = _figure(6.5, 3.2)
    ax = fig.subplots()
    ax.axhline(0.5, color="#555", linestyle="--", linewidth=1)
    for i, loop in enumerate(loops):
        colour = SOURCE_COLOURS[i % len(SOURCE_COLOURS)]
        rows = loop["iterations"]
        name = f" ({loop['loop']})" if len(loops) > 1 else ""
        xs = [r["iteration"] for r in rows]
        ax.plot(
            xs,
            [math.nan if r["win_rate"] is None else r["win_rate"] for r in rows],
            "o-",
            color=colour,
            label=f"win rate against the parent{name}",
        )
        if any(r["judge_agreement"] is not None for r in rows):
            ax.plot(
                xs,
                [math.nan if r["judge_agreement"] is None else r["judge_agreement"] for r in rows],
                "s:",
                color=colour,
                label=f"judge agreement with people{name}",
            )
    iterations = sorted({r["iteration"] for loop in loops for r in loop["iterations"]})
    ax.set_xticks(iterations)
    ax.set_xlim(min(iterations) - 0.5, max(iterations) + 0.5)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("iteration t")
    ax.set_ylabel("rate")
    ax.set_title("Self-rewarding iterations")
    ax.legend(fontsize=8, loc="lower left")
    return to_svg(fig, "self-reward")
