"""Active selection from the store: `select_prompts` gathers the numbers the pickers need.

It reads the candidates, the AI judges' rankings and the prompts people have
ranked from the store, runs the reward model(s) on the candidates (their scores,
and for `diversity` their last-layer features), and hands the numbers to the
pickers of `preflab.labelling.active`, for `preflab ls push --select`.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.db.models import OVERALL, Annotator, Ranking, RankingStatus
from preflab.db.pairs.views import by_criterion, iter_prompt_rankings
from preflab.errors import InputError
from preflab.labelling.active import (
    Choice,
    SelectConfig,
    Tiers,
    pick_disagreement,
    pick_diversity,
    pick_random,
    pick_uncertainty,
    ranking_from_scores,
)
from preflab.labelling.selection import PromptCandidates, prompts_with_candidates
from preflab.lm.scoring import Text


def last_layer_features(
    model, tokenizer, prompts: Sequence[Text], responses: Sequence[Text], batch_size: int = 8
) -> list[list[float]]:
    """The hidden state the reward model's scoring head reads (last token, last layer) per response.

    Prompts and responses are text, or messages, read as `preflab.lm.scoring.reward_scores` reads them.
    """
    import torch

    from preflab.lm.scoring import as_trained, pad_id, sequence_ids

    rows = [sequence_ids(tokenizer, *as_trained(tokenizer, p, r)) for p, r in zip(prompts, responses)]
    out: list[list[float]] = [[] for _ in rows]
    device = next(model.parameters()).device
    model.eval()
    with torch.no_grad():
        for start in range(0, len(rows), batch_size):
            batch = rows[start : start + batch_size]
            width = max(map(len, batch))
            ids = torch.full((len(batch), width), pad_id(tokenizer), dtype=torch.long)
            mask = torch.zeros_like(ids)
            for i, row in enumerate(batch):  # right padding, as scoring pads
                ids[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), 1
            hidden = model(
                input_ids=ids.to(device), attention_mask=mask.to(device), output_hidden_states=True
            ).hidden_states[-1]
            for i, row in enumerate(batch):
                out[start + i] = hidden[i, len(row) - 1].float().cpu().tolist()
    return out


def judge_rankings(
    session: Session, wanted: set[int], criterion: str | None = None
) -> dict[int, dict[str, list[Tiers]]]:
    """The AI rankings of the prompts `wanted`: prompt id -> criterion -> tiers (`criterion`'s alone, if given)."""
    out: dict[int, dict[str, list[Tiers]]] = {}
    for pid, views in iter_prompt_rankings(session, annotator_kind="ai"):
        if pid in wanted:
            for name, same in by_criterion(views).items():
                if criterion is None or name == criterion:
                    out.setdefault(pid, {})[name] = [v.tiers for v in same]
    return out


def _human_ranked(session: Session) -> set[int]:
    return set(
        session.scalars(
            select(Ranking.prompt_id)
            .join(Annotator, Annotator.id == Ranking.annotator_id)
            .where(Annotator.kind == "human", Ranking.status == RankingStatus.valid.value)
            .distinct()
        )
    )


def select_prompts(
    sessions: sessionmaker[Session],
    among: Sequence[int],
    config: SelectConfig,
    k: int,
    *,
    seed: int = 0,
    reporter: Reporter = SILENT,
    criterion: str | None = None,
) -> list[Choice]:
    """The K prompts of `among` that `config.select` chooses, best first, with score and reason.

    Reads the store in short transactions; the reward models are loaded and run
    outside them. `diversity` counts the prompts people have ranked already as
    information it starts from. `disagreement` compares rankings of one criterion
    with each other (`criterion`'s alone, if given; else each criterion's, and a
    prompt scores as its most disputed one); a reward model's ranking is a voice in
    `criterion`, else in `overall`.

    Raises:
        InputError: the strategy has nothing to score (no AI rankings to compare, no candidates).
    """
    strategy = config.select or "random"
    if strategy == "random":
        return pick_random(among, k, seed)
    wanted = set(among)
    with sessions.begin() as session:
        items: list[PromptCandidates] = prompts_with_candidates(session, sorted(wanted), min_candidates=2)
        judged = judge_rankings(session, wanted, criterion) if strategy == "disagreement" else {}
        ranked = sorted(_human_ranked(session) - wanted) if strategy == "diversity" else []
        context = prompts_with_candidates(session, ranked, min_candidates=2) if ranked else []
    if not items:
        raise InputError("none of the prompts to choose from has two or more candidates")
    members = [
        _run_reward_model(sessions, name, items + context, strategy, config, reporter) for name in config.reward_models
    ]
    if strategy == "disagreement":
        for scores, _ in members:
            for item in items:
                judged.setdefault(item.prompt_id, {}).setdefault(criterion or OVERALL, []).append(
                    ranking_from_scores(item.candidate_ids, scores[item.prompt_id])
                )
        if not any(len(views) >= 2 for named in judged.values() for views in named.values()):
            raise InputError(
                "no prompt to choose from has two AI rankings of one criterion to compare; run two judges "
                "(`preflab judge …`) or give --reward-model"
            )
        return pick_disagreement(judged, k)
    if strategy == "uncertainty":
        return pick_uncertainty(
            {item.prompt_id: [scores[item.prompt_id] for scores, _ in members] for item in items}, k
        )
    scores, features = members[0]
    return pick_diversity(
        {item.prompt_id: features[item.prompt_id] for item in items},
        k,
        scores=scores,
        labelled={item.prompt_id: features[item.prompt_id] for item in context},
    )


def _run_reward_model(
    sessions, name: str, items: list[PromptCandidates], strategy: str, config: SelectConfig, reporter: Reporter
):
    """(scores, features) of every candidate, by prompt id; features only for `diversity`."""
    from preflab.lm.names import load_named_model
    from preflab.lm.scoring import exchange, reward_scores

    named = load_named_model(sessions, name, record=False, scorer=True)
    # Each candidate given its prompt's whole history (a conversation goes through the chat template).
    inputs = [exchange(item.history, item.reply(i)) for item in items for i in range(len(item.texts))]
    prompts, responses = [p for p, _ in inputs], [r for _, r in inputs]
    reporter.note(f"scoring {len(responses):,} candidates with {named.label}")
    flat = reward_scores(named.model, named.tokenizer, prompts, responses, config.select_batch_size)
    embedded = (
        last_layer_features(named.model, named.tokenizer, prompts, responses, config.select_batch_size)
        if strategy == "diversity"
        else None
    )
    scores, features, at = {}, {}, 0
    for item in items:
        n = len(item.texts)
        scores[item.prompt_id] = flat[at : at + n]
        if embedded is not None:
            features[item.prompt_id] = embedded[at : at + n]
        at += n
    return scores, features
