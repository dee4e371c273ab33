"""The table of judges: every kind of judge, and everything that differs between kinds.

Each judge is one module with one interface: a config dataclass (its options) and a
function from a batch of prompts' candidates to one judgement per prompt. A judge that
reads a causal LM makes it on an engine (`judge_on(engine, config)`: in this process or on
a server, one path); one whose model is a sequence classifier (a scorer) reads its model
here (`make_judge(model, tokenizer, config)`). Its entry here says how it is run, which
prompt text names it, the help of its `preflab judge KIND` command. The commands, the
pipeline, `train eval` and self-reward read this table; adding a judge is one module and
one entry.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import partial
from typing import Any

from preflab.labelling.judges import likelihood, pair_ranker, pairwise, prompts, reward_model, score


@dataclass(frozen=True)
class Judge:
    """One kind of judge."""

    config: type  # its config dataclass: the command's options, the judge's identity
    help: str  # the `preflab judge KIND` command's help (with its example)
    # A judge that reads a causal LM: (engine, config) -> the judge function, on any engine (`preflab.lm.engines`).
    on_engine: Callable[[Any, Any], Callable] | None = None
    # A judge whose model is a sequence classifier (a scorer): (model, tokenizer, config) -> the judge function.
    scores: Callable[[Any, Any, Any], Callable] | None = None
    model_argument: str | None = None  # the metavar of the command's required model argument; None: --model
    prompt: str | None = None  # its prompt text, whose hash names the judge
    needs_reference: bool = False  # it judges only prompts with a reference answer
    # Refuses options given on the command line that this config would not read (one sentence).
    check_given: Callable[[Any, Collection[str]], None] | None = None

    @property
    def scorer(self) -> bool:
        """Its model is a one-label sequence classifier, not a causal LM: it runs in this process only."""
        return self.on_engine is None

    def make(self, model, tokenizer, config) -> Callable:
        """The judge function on a model loaded here: a scorer reads it, a causal LM's judge through its engine."""
        if self.on_engine is None:
            return self.scores(model, tokenizer, config)
        from preflab.lm.engines import open_engine
        from preflab.lm.names import NamedModel

        loaded = NamedModel(getattr(model, "name_or_path", ""), "", None, model, tokenizer)
        return self.on_engine(open_engine(model=loaded, batch_size=config.batch_size), config)


JUDGES: dict[str, Judge] = {
    "pairwise": Judge(
        pairwise.PairwiseConfig,
        """Judge every pair in both orders from the next-token probabilities of "A" and "B".

        Example: preflab judge pairwise --aggregate bradley-terry
        """,
        on_engine=pairwise.judge_on,
        prompt=prompts.PAIRWISE_SYSTEM + prompts.PAIRWISE_USER,
    ),
    "score": Judge(
        score.ScoreConfig,
        """Grade each response with the additive 5-point prompt: k sampled replies, or the expected score.

        --method sampled samples k replies and averages their "Score: n"; --method
        expected starts the answer with "Score: " and reads the probability-weighted
        mean of the tokens 0-5 from one forward pass per response: it always yields a
        score, and `preflab judge report` says when the judge is guessing.

        Example: preflab judge score --method expected
        """,
        on_engine=score.judge_on,
        prompt=prompts.SCORE_PROMPT,
        check_given=score.refuse_unread,
    ),
    "reference": Judge(
        score.ScoreConfig,
        """Grade each response against the prompt's reference answer (prompts with one only).

        The same two methods as `preflab judge score` (--method sampled or expected).

        Example: preflab judge reference --method expected
        """,
        on_engine=partial(score.judge_on, with_reference=True),
        prompt=prompts.REFERENCE_PROMPT,
        needs_reference=True,
        check_given=score.refuse_unread,
    ),
    "reward-model": Judge(
        reward_model.RewardModelConfig,
        """Score each response with a one-label sequence-classification model (a reward model).

        Example: preflab judge reward-model out/reward-model
        """,
        scores=reward_model.make_judge,
        model_argument="MODEL",
    ),
    "likelihood": Judge(
        likelihood.LikelihoodConfig,
        """Score each response by the model's average token log-likelihood of it.

        Example: preflab judge likelihood --model smollm2-135m-instruct
        """,
        on_engine=likelihood.judge_on,
    ),
    "pair-ranker": Judge(
        pair_ranker.PairRankerConfig,
        """Rank candidates from a trained pair ranker's P(A ≻ B) for every pair; the probabilities are stored.

        VERSION is a `preflab train pair-ranker` model version (or its folder). Each
        candidate's details keep P(it ≻ each other candidate); the ranking is their
        Copeland score (wins − losses) or --aggregate bradley-terry.

        Example: preflab judge pair-ranker pair-ranker-4 --aggregate bradley-terry
        """,
        scores=pair_ranker.make_judge,
        model_argument="VERSION",
    ),
}

JUDGE_KINDS = tuple(JUDGES)
# Judges whose model is a one-label sequence classifier (loaded with `scorer=True`), not a causal LM.
SCORER_JUDGES = tuple(kind for kind, judge in JUDGES.items() if judge.scorer)
# The judges a causal LM runs on any prompt's candidates (no reward model, no reference answer needed).
LM_JUDGES = tuple(sorted(kind for kind, judge in JUDGES.items() if not judge.scorer and not judge.needs_reference))
