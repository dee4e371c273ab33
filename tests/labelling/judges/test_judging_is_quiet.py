"""Judging in process prints nothing of transformers' to the user (issue 46 §1i).

transformers 5.x renamed the key/value cache a forward pass takes and returns to `cache`, and
says so to anyone still passing `past_key_values`: a FutureWarning and a logged line on
stderr, once per process. The judges pass and read it under the name the loaded model's
forward takes (`forward.cache_argument`), so every judge that reads a causal LM in process (on
the transformers engine), and the engine's other calls, run without either.
"""

from __future__ import annotations

import logging
import warnings

import pytest

from preflab.labelling.selection import PromptCandidates
from tests.tiny_models import tiny_causal_lm

ITEMS = [
    PromptCandidates.of(1, "What is the capital of France?", None, [1, 2, 3], ["Paris.", "Lyon.", "It is Paris."]),
    PromptCandidates.of(2, "How many legs does a spider have?", None, [4, 5], ["Eight.", "Six legs."]),
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from preflab.lm.loading import load_causal_lm

    return load_causal_lm(tiny_causal_lm(tmp_path_factory.mktemp("models") / "tiny-lm"), device="cpu")


def test_the_judges_and_the_engine_run_without_a_warning(tiny, capfd):
    from transformers.utils import logging as hf_logging

    from preflab.labelling.judges.pairwise import judge_text
    from preflab.labelling.judges.table import JUDGES
    from preflab.lm.engines import Likelihood, Logprobs, open_engine
    from preflab.lm.forward import MIN_SHARED, shared_prefix
    from preflab.lm.names import NamedModel

    model, tokenizer = tiny
    # The pairwise judge's prompts share their rubric: its prefix is run once and its cache reused.
    texts = [judge_text(tokenizer, item.history, item.texts[0], item.texts[1]) for item in ITEMS]
    assert shared_prefix([tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]) >= MIN_SHARED
    judges = [
        JUDGES["pairwise"].make(model, tokenizer, JUDGES["pairwise"].config()),
        JUDGES["score"].make(model, tokenizer, JUDGES["score"].config(method="expected")),
        JUDGES["score"].make(model, tokenizer, JUDGES["score"].config(n=1, max_new_tokens=4, retries=0)),
        JUDGES["likelihood"].make(model, tokenizer, JUDGES["likelihood"].config()),
    ]
    engine = open_engine(model=NamedModel("tiny", "", None, model, tokenizer))
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_warning()
    logging.Logger.warning_once.cache_clear()  # transformers says each deprecation once per process
    try:
        capfd.readouterr()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            judged = [judge(ITEMS) for judge in judges]
            engine.top_logprobs([Logprobs(item.history, max_tokens=2) for item in ITEMS])
            engine.likelihood([Likelihood(item.history, item.texts[0]) for item in ITEMS])
    finally:
        hf_logging.set_verbosity(verbosity)
    out, err = capfd.readouterr()
    assert all(len(j) == len(ITEMS) for j in judged)
    assert [str(w.message) for w in caught] == []
    assert "deprecated" not in err + out and "past_key_values" not in err + out
