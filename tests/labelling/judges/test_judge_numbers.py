"""Every judge that reads a causal LM, in process, reads the numbers it read before it ran through the engine.

Recorded from the in-process judges of before issue 47 (`make_judge` on the model's own forward passes) on
the same tiny model (`tiny_causal_lm`, seed 0): the one path (`JUDGES[kind].make` opens a transformers engine
on the loaded model) must store the same scores and details. Floats to 1e-6, sampled replies exactly.
"""

from __future__ import annotations

import pytest

from tests.lm.conversations import FRANCE
from tests.tiny_models import tiny_causal_lm

QUESTION = "What is the capital of France?"
# candidate -> (the other, P(it better | shown first), P(it better | shown second)); every pair a tie (near 0.5).
PAIRWISE = [
    {10: [(11, 0.5029, 0.4971), (12, 0.5028, 0.4972)], 11: [(10, 0.5029, 0.4971), (12, 0.5024, 0.4976)]},
    {20: [(21, 0.5027, 0.4973)], 21: [(20, 0.5027, 0.4973)]},
]
# candidate -> (expected score, mass of the score tokens, each score's share)
EXPECTED = [
    {
        10: (2.394717718893502, 0.016264, [0.194, 0.1602, 0.1709, 0.161, 0.1599, 0.154]),
        11: (2.3942060552352884, 0.01626, [0.194, 0.1603, 0.1709, 0.161, 0.1598, 0.154]),
        12: (2.394805207042042, 0.016265, [0.194, 0.1602, 0.1708, 0.1609, 0.16, 0.1541]),
    },
    {
        20: (2.3941238966347584, 0.016278, [0.1941, 0.1607, 0.1703, 0.1609, 0.1599, 0.1541]),
        21: (2.3942932296324924, 0.016277, [0.1941, 0.1607, 0.1703, 0.1609, 0.1599, 0.1541]),
    },
]
REFERENCE = {
    10: (2.4049857309704397, 0.016273, [0.1924, 0.1585, 0.1711, 0.1617, 0.1626, 0.1538]),
    11: (2.4035607048125023, 0.016264, [0.1925, 0.1587, 0.1712, 0.1615, 0.1624, 0.1537]),
    12: (2.4048462810272078, 0.016274, [0.1925, 0.1586, 0.171, 0.1614, 0.1627, 0.1539]),
}
# candidate -> (mean log p per token, tokens, their sum)
LIKELIHOOD = [
    {10: (-6.666593, 3, -19.9998), 11: (-6.579428, 10, -65.7943), 12: (-6.55222, 8, -52.4178)},
    {20: (-6.660674, 3, -19.982), 21: (-6.61388, 3, -19.8416)},
]
# candidate -> its two sampled replies (a random model names no score: each a parse failure)
SAMPLED = [
    {10: ["\ufffd to\ufffdder", "\ufffd based Score that"], 11: ["cu\ufffdu#", "Reply\ufffd 2"]},
    {20: ["\ufffd\ufffdTo with", "aselude hU"], 21: ["Reply clearcu additive", "\x03st\ufffd\x1a"]},
]


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """kind -> the judgements of the two prompts (a question with three answers, a conversation with two)."""
    from preflab.labelling.judges.table import JUDGES
    from preflab.labelling.selection import PromptCandidates
    from preflab.lm.loading import load_causal_lm

    model, tokenizer = load_causal_lm(str(tiny_causal_lm(tmp_path_factory.mktemp("numbers") / "lm")))
    items = [
        PromptCandidates.of(1, QUESTION, "Paris", [10, 11, 12], ["Paris.", "Lyon, I think.", "It is Berlin."]),
        PromptCandidates.of(2, FRANCE, None, [20, 21], ["Paris.", "Rome."]),
    ]
    settings = {
        "pairwise": ("pairwise", {}),
        "expected": ("score", {"method": "expected"}),
        "reference": ("reference", {"method": "expected"}),
        "sampled": ("score", {"n": 2, "max_new_tokens": 4, "retries": 0}),
        "likelihood": ("likelihood", {}),
    }
    out = {}
    for name, (kind, values) in settings.items():
        judge = JUDGES[kind].make(model, tokenizer, JUDGES[kind].config(**values))
        out[name] = judge(items[:1] if kind == "reference" else items)
    return out


def test_pairwise_verdicts(judged):
    for (scores, details), expected in zip(judged["pairwise"], PAIRWISE):
        assert set(scores.values()) == {0.0}  # every pair a tie: Copeland scores all 0
        for cid, pairs in expected.items():
            got = [(p["vs"], p["p_as_a"], p["p_as_b"]) for p in details[cid]["pairs"]]
            assert got == pairs and all(p["outcome"] == "tie" for p in details[cid]["pairs"])


@pytest.mark.parametrize("name", ["expected", "reference"])
def test_expected_scores(judged, name):
    expected = EXPECTED if name == "expected" else [REFERENCE]
    for (scores, details), want in zip(judged[name], expected):
        for cid, (score, mass, probs) in want.items():
            assert scores[cid] == pytest.approx(score, abs=1e-6)
            assert details[cid] == {"mass": mass, "probs": probs}


def test_likelihood(judged):
    for (scores, details), want in zip(judged["likelihood"], LIKELIHOOD):
        assert {c: (scores[c], details[c]["tokens"], details[c]["sum_logprob"]) for c in want} == want


def test_sampled_grades(judged):
    for (scores, details), want in zip(judged["sampled"], SAMPLED):
        for cid, replies in want.items():
            assert scores[cid] is None and details[cid]["failed_replies"] == replies
            assert details[cid]["attempts"] == details[cid]["parse_failures"] == 2
