"""Which tokens of a conversation are a reply's, and their score in process (`preflab.lm.replies`): the laws.

Whatever the reply (cut mid-word, mid-`\\n\\n`, at a token count or mid-character; with
trailing spaces, emoji, CJK, the template's own marker) and whatever its history, on a tiny
real model:

- the reply's tokens are exactly the last tokens of the rendered conversation that hold any of
  its characters, as the tokenizer's own character offsets tell (an independent reading), a
  token merged across the seam included;
- its score is the sum of those tokens' log-probabilities in one unpadded forward pass, however
  the asks are batched, from the transformers engine (the likelihood judge's one path in process).

The served engine scores the same tokens: tests/lm/test_vllm_likelihood.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preflab.lm.engines import Likelihood
from preflab.lm.replies import reply_tokens
from tests.lm.awkward import asks, corpus, cut
from tests.properties import examples
from tests.tiny_models import tiny_causal_lm, tiny_tokenizer

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny model whose tokenizer merges the awkward pieces (a reply's leading newlines with the template's)."""
    from preflab.lm.loading import load_causal_lm

    path = tmp_path_factory.mktemp("models") / "tiny-lm"
    return load_causal_lm(tiny_causal_lm(path, tokenizer=tiny_tokenizer(1000, corpus())), device="cpu")


def by_offsets(tokenizer, history, reply) -> tuple[list[int], list[int]]:
    """(the rendered conversation's ids, the positions of the tokens holding the reply's characters), from offsets."""
    context = tokenizer.apply_chat_template(history, tokenize=False, add_generation_prompt=True)
    whole = tokenizer.apply_chat_template(
        [*history, {"role": "assistant", "content": reply}], tokenize=False, continue_final_message=True
    )
    seam = next((i for i, (a, b) in enumerate(zip(context, whole)) if a != b), min(len(context), len(whole)))
    encoded = tokenizer(whole, add_special_tokens=False, return_offsets_mapping=True)
    return encoded["input_ids"], [i for i, (_, end) in enumerate(encoded["offset_mapping"]) if end > seam]


def unpadded(model, ids: list[int], positions: list[int]) -> float:
    import torch

    with torch.inference_mode():
        logprobs = model(input_ids=torch.tensor([ids])).logits[0].float().log_softmax(-1)
    return sum(float(logprobs[p - 1, ids[p]]) for p in positions)


@settings(max_examples=examples(30))
@given(batch=asks(max_size=5), batch_size=st.integers(1, 4))
def test_a_reply_is_scored_on_the_tokens_that_hold_it_however_batched(tiny, batch, batch_size):
    from preflab.lm.engines import open_engine
    from preflab.lm.names import NamedModel

    model, tokenizer = tiny
    pairs = [(history, cut(tokenizer, *spec)) for history, spec in batch]
    engine = open_engine(model=NamedModel("tiny", "", None, model, tokenizer), batch_size=batch_size)
    scored = engine.likelihood([Likelihood(history, reply) for history, reply in pairs])
    for (history, reply), result in zip(pairs, scored):
        n = result.tokens
        ids, positions = by_offsets(tokenizer, history, reply)
        # The reply's tokens: the last ones, contiguous, none of them the conversation's first.
        assert positions == list(range(len(ids) - len(positions), len(ids))) and positions[:1] != [0]
        assert reply_tokens(tokenizer, history, reply) == (ids, len(positions))
        assert n == len(positions) and (n > 0 or reply == "")
        assert result.total == pytest.approx(unpadded(model, ids, positions), abs=1e-5 * max(n, 1))


def test_a_reply_s_leading_newlines_merge_with_the_template_s_and_are_the_reply_s(tiny):
    from preflab.lm.loading import chat_prompt

    _, tokenizer = tiny
    context = tokenizer(chat_prompt(tokenizer, "Hi"), add_special_tokens=False)["input_ids"]
    ids, n = reply_tokens(tokenizer, "Hi", "\n\nstarts")
    assert ids[: len(ids) - n] == context[:-1]  # the template's last newline is in the reply's first token
    assert tokenizer.decode(ids[len(ids) - n :]) == "\n\n\nstarts"
