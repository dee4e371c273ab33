"""The pair-ranker judge: a trained PairRM-style ranker's P(A ≻ B) for every pair of a prompt's candidates.

The ranker (`preflab train pair-ranker`, loaded through the model leaf) reads the
prompt and both candidates in one sequence. Its probabilities become a ranking
the way the pairwise LLM judge's do (`pairwise.rank_pairs`: Copeland score or
Bradley–Terry), and each candidate's details keep every pair's probability
(`pairs`: `vs`, `p_as_a` = `p_as_b` = P(this ≻ vs), `outcome`) with its wins,
losses and ties. The ranker's prediction is antisymmetric by construction, so
the probability is the same in either order and the judge's swap consistency is 1.
A prompt that is a conversation is read whole, through the chat template.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

from preflab.labelling.judges.base import Judgement
from preflab.labelling.judges.pairwise import PairwiseConfig, rank_pairs
from preflab.labelling.selection import PromptCandidates


@dataclass
class PairRankerConfig(PairwiseConfig):
    """How the pair-ranker judge aggregates the ranker's pairwise probabilities.

    The input format (max length, chat or plain text) is the ranker's own, read from its folder.
    """

    batch_size: int = field(
        default=16, metadata={"help": "Pair-ranker sequences (one pair in one order) per forward pass."}
    )


def make_judge(model, tokenizer, config: PairRankerConfig):
    """A function from a batch of prompts to their judgements, from a loaded pair ranker."""
    from preflab.lm.pair_ranker import preference_probabilities, ranker_format
    from preflab.lm.scoring import exchange

    settings = ranker_format(model)  # also refuses a model that is not a pair ranker
    as_chat = settings.get("conversational", False)

    def inputs(item: PromptCandidates):
        """The prompt and every candidate as the ranker reads them: all plain text, or all messages."""
        shown = [exchange(item.history, item.reply(i), as_chat) for i in range(len(item.texts))]
        if all(isinstance(p, str) for p, _ in shown):
            return shown[0][0], [r for _, r in shown]
        # One conversation (or one reply of several turns) puts the whole prompt through the chat template.
        return item.history, [item.reply(i) for i in range(len(item.texts))]

    def judge(items: list[PromptCandidates]) -> list[Judgement]:
        pairs = [(k, i, j) for k, item in enumerate(items) for i, j in combinations(range(len(item.texts)), 2)]
        read = [inputs(item) for item in items]
        probs = preference_probabilities(
            model,
            tokenizer,
            [read[k][0] for k, _, _ in pairs],
            [read[k][1][i] for k, i, _ in pairs],
            [read[k][1][j] for k, _, j in pairs],
            settings["max_length"],
            config.batch_size,
        )
        per_item: list[dict[tuple[int, int], tuple[float, float]]] = [{} for _ in items]
        for (k, i, j), p in zip(pairs, probs):
            ids = items[k].candidate_ids
            per_item[k][(ids[i], ids[j])] = (p, p)
        return [rank_pairs(item.candidate_ids, results, config.aggregate) for item, results in zip(items, per_item)]

    return judge
