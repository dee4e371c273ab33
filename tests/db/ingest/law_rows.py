"""Hypothesis strategies for rows in the public datasets' real shapes, and the JSON Lines rankings format.

Each strategy draws a few rows (`rows_of(fmt)`) from small pools of prompts, replies and models, so rows
share prompts and replies, and models meet each other. The shapes are those of the ten formats'
examples (`Format.example`, tests/db/ingest/datasets/shapes_*.py): a row that a format quarantines is
allowed (the law holds for it too), but most parse. `FLAT` names the shapes a CSV file can hold; `GROUPED`
the formats whose rankings span rows, drawn as groups of rows (oasst2's trees, HelpSteer2's prompts).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from hypothesis import strategies as st

PROMPTS = ("Name a prime.", "Say hi.", "Capital of France?", "2+2?", "Ça va ?")
REPLIES = ("7", "9 is prime.", "Hi!", "Hello there.", "Paris.", "Lyon.", "4", "Five.", "Je vais bien 🙂")
MODELS = ("alpha", "beta", "gamma", "delta")
SCORES = (1.0, 2.5, 7.0, 8.5, 10.0)
# The formats, by their `--format` name, then "rankings" (`preflab import rankings`).
FORMATS = (
    "trl",
    "hh-rlhf",
    "ultrafeedback",
    "arena",
    "oasst2",
    "helpsteer3",
    "helpsteer2",
    "shp",
    "nectar",
    "pku-saferlhf",
)
FLAT = {"hh-rlhf", "shp", "pku-saferlhf", "helpsteer2"}  # CSV holds these (and trl's text, arena's 55k: `flat`)
GROUPED = {"oasst2", "helpsteer2"}  # drawn as groups of rows, kept together
ASPECTS = ("helpfulness", "honesty", "instruction_following", "truthfulness")
RATINGS = ("1", "2", "3", "4", "5", "N/A")  # UltraFeedback's aspect ratings; "N/A": GPT-4 gave none


def replies(n_min: int = 2, n_max: int = 2):
    return st.lists(st.sampled_from(REPLIES), min_size=n_min, max_size=n_max, unique=True)


def turn(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


@st.composite
def trl_rows(draw, i: int, binarized: bool) -> dict[str, Any]:
    prompt, (chosen, rejected) = draw(st.sampled_from(PROMPTS)), draw(replies())
    if not binarized:
        return {"prompt": prompt, "chosen": chosen, "rejected": rejected}
    row = {
        "prompt": prompt,
        "prompt_id": hashlib.sha256(prompt.encode()).hexdigest(),
        "chosen": [turn("user", prompt), turn("assistant", chosen)],
        "rejected": [turn("user", prompt), turn("assistant", rejected)],
        "messages": [turn("user", prompt), turn("assistant", chosen)],
        "score_chosen": draw(st.sampled_from(SCORES)),
        "score_rejected": draw(st.sampled_from(SCORES)),
    }
    return row


@st.composite
def hh_rows(draw, i: int) -> dict[str, Any]:
    prompt, (chosen, rejected) = draw(st.sampled_from(PROMPTS)), draw(replies())
    return {f: f"\n\nHuman: {prompt}\n\nAssistant: {r}" for f, r in (("chosen", chosen), ("rejected", rejected))}


@st.composite
def ultrafeedback_rows(draw, i: int, prompts=PROMPTS) -> dict[str, Any]:
    """A row rated by every aspect, a rating now and then "N/A" (that completion unrated by that aspect)."""
    texts = draw(replies(2, 3))
    completions = []
    for text in texts:
        score = draw(st.sampled_from(SCORES))
        completions.append(
            {
                "model": draw(st.sampled_from(MODELS)),
                "response": text,
                "overall_score": score,
                "fine-grained_score": score / 2,
                "annotations": {a: {"Rating": draw(st.sampled_from(RATINGS)), "Rationale": "ok"} for a in ASPECTS},
            }
        )
    return {
        "source": "evol_instruct",
        "instruction": draw(st.sampled_from(prompts)),
        "models": [c["model"] for c in completions],
        "completions": completions,
    }


@st.composite
def arena_rows(draw, i: int, flat: bool) -> dict[str, Any]:
    prompt, (a, b) = draw(st.sampled_from(PROMPTS)), draw(replies())
    model_a, model_b = draw(st.lists(st.sampled_from(MODELS), min_size=2, max_size=2, unique=True))
    winner = draw(st.sampled_from(("model_a", "model_b", "tie", "tie (bothbad)")))
    if flat:  # arena-human-preference-55k, as Kaggle's CSV holds it
        return {
            "id": 1000 + i,
            "model_a": model_a,
            "model_b": model_b,
            "prompt": json.dumps([prompt]),
            "response_a": json.dumps([a]),
            "response_b": json.dumps([b]),
            "winner_model_a": int(winner == "model_a"),
            "winner_model_b": int(winner == "model_b"),
            "winner_tie": int(winner.startswith("tie")),
        }
    return {
        "question_id": f"q{i}",
        "model_a": model_a,
        "model_b": model_b,
        "winner": winner,
        "judge": draw(st.sampled_from(("arena_user_1", "arena_user_2"))),
        "turn": 1,
        "conversation_a": [turn("user", prompt), turn("assistant", a)],
        "conversation_b": [turn("user", prompt), turn("assistant", b)],
    }


@st.composite
def oasst_trees(draw, i: int) -> list[dict[str, Any]]:
    """One message tree: a prompter's message and two or three ranked assistant replies, one row each."""
    tree = f"t{i}"

    def message(mid, parent, role, text, rank=None):
        return {
            "message_id": mid,
            "parent_id": parent,
            "message_tree_id": tree,
            "role": role,
            "text": text,
            "lang": "en",
            "rank": rank,
            "deleted": False,
            "review_result": True,
        }

    texts = draw(replies(2, 3))
    ranks = draw(st.lists(st.integers(0, 2), min_size=len(texts), max_size=len(texts)))
    rows = [message(tree, None, "prompter", draw(st.sampled_from(PROMPTS)))]
    return rows + [
        message(f"{tree}-{n}", tree, "assistant", text, rank) for n, (text, rank) in enumerate(zip(texts, ranks))
    ]


@st.composite
def helpsteer_rows(draw, i: int) -> dict[str, Any]:
    prompt, (one, two) = draw(st.sampled_from(PROMPTS)), draw(replies())
    value = draw(st.integers(-3, 3))
    return {
        "domain": "general",
        "language": "english",
        "context": [turn("user", prompt)],
        "response1": one,
        "response2": two,
        "overall_preference": value,
        "individual_preference": [{"score": value, "reasoning": "@Response 1 is fine."}],
    }


@st.composite
def helpsteer2_prompts(draw, i: int) -> list[dict[str, Any]]:
    """One prompt's rated replies, one row each (two, as the dataset's; now and then three), the prompt the
    group's own: two groups of one prompt would not be together once shuffled."""
    prompt = f"{draw(st.sampled_from(PROMPTS))} ({i})"
    ratings = st.integers(0, 4)
    return [
        {
            "prompt": prompt,
            "response": text,
            **{a: draw(ratings) for a in ("helpfulness", "correctness", "coherence", "complexity", "verbosity")},
        }
        for text in draw(replies(2, 3))
    ]


@st.composite
def shp_rows(draw, i: int) -> dict[str, Any]:
    prompt, (a, b) = draw(st.sampled_from(PROMPTS)), draw(replies())
    scores = draw(st.lists(st.integers(1, 400), min_size=2, max_size=2))
    return {
        "post_id": f"p{i}",
        "domain": "askculinary_train",
        "upvote_ratio": 0.98,
        "history": prompt,
        "c_root_id_A": f"a{i}",
        "c_root_id_B": f"b{i}",
        "score_A": scores[0],
        "score_B": scores[1],
        "human_ref_A": a,
        "human_ref_B": b,
        "labels": draw(st.integers(0, 1)),
        "seconds_difference": 2.0,
        "score_ratio": draw(st.sampled_from((1.5, 2.048, 3.0))),
    }


@st.composite
def nectar_rows(draw, i: int) -> dict[str, Any]:
    texts = draw(replies(2, 4))
    return {
        "prompt": f"\n\nHuman: {draw(st.sampled_from(PROMPTS))}\n\nAssistant: ",
        "answers": [
            {"answer": t, "model": draw(st.sampled_from(MODELS)), "rank": float(draw(st.integers(1, 3)))} for t in texts
        ],
        "turns": 1,
        "num_responses": len(texts),
        "source": ["sharegpt"],
        "good_natured": True,
    }


@st.composite
def pku_rows(draw, i: int) -> dict[str, Any]:
    prompt, (zero, one) = draw(st.sampled_from(PROMPTS)), draw(replies())
    sources = draw(st.lists(st.sampled_from(MODELS), min_size=2, max_size=2))
    return {
        "prompt": prompt,
        "response_0": zero,
        "response_1": one,
        "prompt_source": "BeaverTails",
        "response_0_source": sources[0],
        "response_1_source": sources[1],
        "is_response_0_safe": draw(st.booleans()),
        "is_response_1_safe": draw(st.booleans()),
        "response_0_severity_level": draw(st.integers(0, 3)),
        "response_1_severity_level": draw(st.integers(0, 3)),
        "better_response_id": draw(st.integers(0, 1)),
        "safer_response_id": draw(st.integers(0, 1)),
    }


@st.composite
def ranking_lines(draw, i: int) -> dict[str, Any]:
    """A JSON Lines ranking without an id (`preflab import rankings`)."""
    texts = draw(replies(2, 3))
    order = draw(st.permutations(range(len(texts))))
    return {
        "prompt": draw(st.sampled_from(PROMPTS)),
        "responses": texts,
        "ranking": [[order[0]], list(order[1:])] if draw(st.booleans()) else [[k] for k in order],
        "annotator": draw(st.sampled_from(("ann", "bob"))),
        "annotator_kind": "human",
        "model": [draw(st.sampled_from(MODELS)) for _ in texts],
        "scores": [draw(st.sampled_from(SCORES)) for _ in texts],
    }


@st.composite
def rows_of(draw, fmt: str, most: int = 5) -> tuple[list[Any], bool]:
    """(rows, flat): a few rows of `fmt` (a `GROUPED` format: groups, each a list of rows), and whether CSV holds
    them."""
    n = draw(st.integers(2, most))
    if fmt == "trl":
        binarized = draw(st.booleans())
        return [draw(trl_rows(i, binarized)) for i in range(n)], not binarized
    if fmt == "arena":
        flat = draw(st.booleans())
        return [draw(arena_rows(i, flat)) for i in range(n)], flat
    make = {
        "hh-rlhf": hh_rows,
        "ultrafeedback": ultrafeedback_rows,
        "oasst2": oasst_trees,
        "helpsteer3": helpsteer_rows,
        "helpsteer2": helpsteer2_prompts,
        "shp": shp_rows,
        "nectar": nectar_rows,
        "pku-saferlhf": pku_rows,
        "rankings": ranking_lines,
    }[fmt]
    return [draw(make(i)) for i in range(n)], fmt in FLAT
