"""Awkward replies and conversations, where two tokenizations of one text part (issue 46 §1e).

    from tests.lm.awkward import asks, cut, fixed

- `asks()`: a Hypothesis strategy of (history, reply) lists: replies of pieces that byte-level
  BPE splits or merges (`\\n\\n`, trailing spaces, emoji, CJK, combining accents, U+FFFD, the
  chat template's own marker), cut mid-word, mid-`\\n\\n` or at a token count, after one user
  turn or a conversation of several turns.
- `corpus()`: texts a tiny tokenizer learns those pieces' merges from.
- `cut(tokenizer, text, how, at)`: a reply cut as generation cuts one (`at` tokens, decoded,
  stripped: mid-character it ends in U+FFFD) or as a file may hold it (`at` characters).
- `fixed(tokenizer)`: the fixed set the served and in-process engines are compared on, each
  reply named by what it covers.
"""

from __future__ import annotations

from hypothesis import strategies as st

PIECES = [
    "Paris",
    " is",
    " the",
    "capital",
    ".",
    " ",
    "  ",
    "\n",
    "\n\n",
    "\n\n\n",
    " \n\n ",
    "\t",
    "\r\n",
    "😀",
    "🎉",
    "👋🏽",
    "中文",
    "回答",
    "，",
    "é",
    "e\u0301",
    "\ufffd",
    "**",
    " 42",
    "<|im_end|>",
]
HOW = ("whole", "characters", "tokens", "tokens-unstripped")

HISTORY = [{"role": "user", "content": "Tell me about Paris."}]
CONVERSATION = [
    {"role": "system", "content": "Be brief.  "},
    {"role": "user", "content": "Hi 👋\n\n"},
    {"role": "assistant", "content": "Hello!\n\n中文?"},
    {"role": "user", "content": "Tell me about Paris."},
]
LONG = (
    "Paris is the capital of France.\n\nIt is known for the Eiffel Tower, the Louvre and its cafés. "
    "Millions visit every year 🎉.\n\nThe city sits on the Seine, 中文 speakers call it 巴黎, and its "
    "museums hold art from every age."
)


def corpus() -> list[str]:
    """Texts a tiny tokenizer learns the awkward pieces' merges from (whitespace runs, emoji and CJK bytes), so
    that a reply's leading newlines merge with the chat template's, as they do in SmolLM2's tokenizer."""
    runs = ["\n\n", "\n\n\n", " \n\n ", "  ", "\r\n"]
    return [f"{a}{run}{b}{run}" for run in runs for a in PIECES for b in PIECES] * 3


def cut(tokenizer, text: str, how: str, at: int) -> str:
    """`text` whole, or cut at `at` characters, or at `at` tokens as generation cuts (and strips) a reply."""
    if how == "characters":
        return text[:at]
    if how.startswith("tokens"):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][:at]
        cut_text = tokenizer.decode(ids, skip_special_tokens=True)
        return cut_text if how == "tokens-unstripped" else cut_text.strip()
    return text


def texts(min_size: int = 1):
    return st.lists(st.sampled_from(PIECES), min_size=min_size, max_size=10).map("".join)


@st.composite
def reply_spec(draw) -> tuple[str, str, int]:
    """(text, how it is cut, where): see `cut`."""
    return draw(texts()), draw(st.sampled_from(HOW)), draw(st.integers(1, 12))


@st.composite
def history(draw) -> list[dict[str, str]]:
    question = draw(texts())
    if draw(st.booleans()):
        return [{"role": "user", "content": question}]
    return [
        {"role": "system", "content": draw(texts())},
        {"role": "user", "content": draw(texts())},
        {"role": "assistant", "content": draw(texts())},
        {"role": "user", "content": question},
    ]


def asks(min_size: int = 1, max_size: int = 4):
    """Lists of (history, reply spec): a batch of awkward likelihood asks, cut by `cut` once a tokenizer is known."""
    return st.lists(st.tuples(history(), reply_spec()), min_size=min_size, max_size=max_size)


def fixed(tokenizer) -> list[tuple[list[dict[str, str]], str]]:
    """The fixed awkward set: every reply after a conversation of several turns, then the first five (the cut
    ones and the leading newlines) after one user turn."""
    replies = [
        cut(tokenizer, LONG, "tokens", 64),  # cut at 64 tokens (a token boundary), holding \n\n: issue 46 §1e
        cut(tokenizer, LONG, "characters", LONG.index("Eiffel") + 3),  # ... mid-word ("Eif")
        cut(tokenizer, LONG, "characters", 32),  # ... mid-\n\n: the first \n of the two
        cut(tokenizer, "おルくうスードは", "tokens", 14),  # at 14 tokens, mid-character: ends in U+FFFD
        "\n\nstarts with newlines that merge with the template's",
        "ends with two spaces  ",
        "ends with a blank line\n\n",
        "😀 leads, 🎉 inside, and 👋🏽 ends 👋🏽",
        "中文回答，很好。",
        "café and cafe\u0301, tab\tand\r\nCRLF",
        "the template's own <|im_end|> inside",
        "",  # nothing to score: no tokens, on both
    ]
    return [(CONVERSATION, r) for r in replies] + [(HISTORY, r) for r in replies[:5]]
