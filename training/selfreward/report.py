"""`preflab self-reward report`: each iteration's numbers, and a plot of them.

The judge's agreement with people is measured again every time the report is
made: people usually rank an iteration's candidates after it has finished.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from preflab.db.models import (
    Annotator,
    DatasetVersion,
    ModelVersion,
    Prompt,
    Ranking,
    RankingStatus,
    SelfRewardIteration,
)
from preflab.db.quality.agreement import compare_rankings
from preflab.db.store import chunks
from preflab.errors import NotFound
from preflab.training.figures import save_figure


def judge_agreement(session: Session, annotator_id: int | None, prompt_ids: list[int]) -> dict[str, Any]:
    """How often the judge orders a pair of candidates as people did, on the prompts both ranked.

    Every judge ranking is compared with every person's ranking of the same
    prompt, on the candidates both ranked (`preflab.db.quality.agreement.compare_rankings`).
    """
    from preflab.training.selfreward.data import rankings_by_id

    judged: dict[int, list[list[list[int]]]] = {}
    people: dict[int, list[list[list[int]]]] = {}
    if annotator_id is not None:
        for part in chunks(sorted(prompt_ids)):
            valid = Ranking.status == RankingStatus.valid.value
            mine = select(Ranking.id).where(Ranking.annotator_id == annotator_id, Ranking.prompt_id.in_(part), valid)
            humans = (
                select(Ranking.id)
                .join(Annotator, Annotator.id == Ranking.annotator_id)
                .where(Annotator.kind == "human", Ranking.prompt_id.in_(part), valid)
            )
            for target, query in ((judged, mine), (people, humans)):
                for pid, _, _, tiers, _ in rankings_by_id(session, query).values():
                    target.setdefault(pid, []).append(tiers)
    shared = agree = 0
    taus: list[float] = []
    prompts = set()
    for pid, rankings in judged.items():
        for ours in rankings:
            for theirs in people.get(pid, []):
                n, a, tau = compare_rankings(ours, theirs)
                prompts.add(pid)
                shared, agree = shared + n, agree + a
                if tau is not None:
                    taus.append(tau)
    return {
        "prompts": len(prompts),
        "shared_pairs": shared,
        "pairwise_agreement": agree / shared if shared else None,
        "kendall_tau": sum(taus) / len(taus) if taus else None,
    }


def loop_report(session: Session, loop: str) -> list[dict[str, Any]]:
    """One row per iteration of the loop, oldest first."""
    rows = list(
        session.scalars(
            select(SelfRewardIteration).where(SelfRewardIteration.loop == loop).order_by(SelfRewardIteration.iteration)
        )
    )
    if not rows:
        loops = sorted(set(session.scalars(select(SelfRewardIteration.loop))))
        hint = (
            f" (loops here: {', '.join(loops)})" if loops else "; start one with `preflab self-reward --iterations N`"
        )
        raise NotFound(f"there is no self-reward loop named {loop!r}{hint}")
    out = []
    for row in rows:
        metrics = row.metrics or {}
        parent = session.get(ModelVersion, row.policy_id)
        version = session.get(ModelVersion, row.model_version_id) if row.model_version_id else None
        dataset = session.get(DatasetVersion, row.dataset_version_id) if row.dataset_version_id else None
        prompt_ids = list(
            session.scalars(
                select(Prompt.id).where(Prompt.source == f"self-reward:{loop}", Prompt.iteration == row.iteration)
            )
        )
        evaluation = metrics.get("eval") or {}
        out.append(
            {
                "iteration": row.iteration,
                "step": row.step,
                "parent": parent.name,
                "model_version": version.name if version else None,
                "dataset_version": dataset.name if dataset else None,
                "prompts": metrics.get("prompts"),
                "candidates": metrics.get("candidates"),
                "pairs": metrics.get("pairs"),
                "judge": metrics.get("judge"),
                "dpo_heldout_reward_accuracy": (metrics.get("dpo") or {}).get("heldout_reward_accuracy"),
                "win_rate": evaluation.get("win_rate"),
                "wins": evaluation.get("wins"),
                "losses": evaluation.get("losses"),
                "ties": evaluation.get("ties"),
                "eval_prompts": evaluation.get("prompts"),
                "judge_agreement": judge_agreement(session, row.judge_annotator_id, prompt_ids),
                # Measured when the iteration was evaluated, on prompts people had ranked by then.
                "judge_agreement_ranked": metrics.get("judge_agreement_ranked"),
            }
        )
    return out


def _value(value) -> float:
    return float("nan") if value is None else float(value)


def plot_report(rows: list[dict[str, Any]], out: str | Path, title: str = "Self-rewarding loop") -> Path:
    """A PNG of the win rate against the previous model and the judge's agreement with people, by iteration.

    Agreement is drawn twice: on the iteration's own prompts (once people rank
    them) and on prompts people had ranked when the iteration was evaluated.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    x = [row["iteration"] for row in rows]
    fig = Figure(figsize=(6.5, 4), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.axhline(0.5, color="0.6", linestyle="--", linewidth=1)
    ax.plot(
        x, [_value(r["win_rate"]) for r in rows], "o-", color="tab:blue", label=r"win rate of $M_t$ against $M_{t-1}$"
    )
    ax.plot(
        x,
        [_value(r["judge_agreement"]["pairwise_agreement"]) for r in rows],
        "s-",
        color="tab:orange",
        label="judge agreement with people",
    )
    ax.plot(
        x,
        [_value((r["judge_agreement_ranked"] or {}).get("pairwise_agreement")) for r in rows],
        "^--",
        color="tab:green",
        label="judge agreement with people, on prompts they had ranked",
    )
    ax.set_xticks(x)
    ax.set_xlabel("iteration t")
    ax.set_ylim(0, 1)
    ax.set_ylabel("rate")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right")
    return save_figure(fig, out)


def write_loop_report(session: Session, loop: str, out: str | Path | None = None) -> tuple[list[dict[str, Any]], Path]:
    """The loop's rows (`loop_report`) and their plot, written to `out` (default: self-reward-LOOP.png here)."""
    rows = loop_report(session, loop)
    return rows, plot_report(rows, out or f"self-reward-{loop}.png", f"Self-rewarding loop {loop!r}")
