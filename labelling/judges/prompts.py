"""The judges' prompt texts and the parser for "Score: <n>" replies."""

from __future__ import annotations

import re

# MT-Bench's pairwise judge (Zheng et al., 2023), asked for a bare letter so the verdict
# can be read from the next-token probabilities of "A" and "B".
PAIRWISE_SYSTEM = (
    "Please act as an impartial judge and evaluate the quality of the responses provided by two AI "
    "assistants to the user question displayed below. Choose the assistant that follows the user's "
    "instructions and answers the user's question better, considering helpfulness, relevance, accuracy "
    "and level of detail. Do not let the order in which the responses were presented, their length, or "
    "the names of the assistants influence your decision."
)
PAIRWISE_USER = (
    "[User Question]\n{question}\n\n"
    "[The Start of Assistant A's Answer]\n{a}\n[The End of Assistant A's Answer]\n\n"
    "[The Start of Assistant B's Answer]\n{b}\n[The End of Assistant B's Answer]\n\n"
    'Which assistant\'s answer is better? Reply with one letter: "A" or "B".'
)

# The additive 5-point prompt of "Self-Rewarding Language Models" (Yuan et al., 2024).
SCORE_PROMPT = """Review the user's question and the corresponding response using the additive 5-point
scoring system described below. Points are accumulated based on the satisfaction of
each criterion:
- Add 1 point if the response is relevant and provides some information related to
the user's inquiry, even if it is incomplete or contains some irrelevant content.
- Add another point if the response addresses a substantial portion of the user's
question, but does not completely resolve the query or provide a direct answer.
- Award a third point if the response answers the basic elements of the user's question
in a useful way, regardless of whether it seems to have been written by an AI Assistant
or if it has elements typically found in blogs or search results.
- Grant a fourth point if the response is clearly written from an AI Assistant's
perspective, addressing the user's question directly and comprehensively, and is
well-organized and helpful, even if there is slight room for improvement in clarity,
conciseness or focus.
- Bestow a fifth point for a response that is impeccably tailored to the user's question
by an AI Assistant, without extraneous information, reflecting expert knowledge, and
demonstrating a high-quality, engaging, and insightful answer.

User: {question}
<response>{response}</response>

After examining the user's instruction and the response:
- Briefly justify your total score, up to 100 words.
- Conclude with the score using the format: "Score: <total points>"

Remember to assess from the AI Assistant perspective, utilizing web search knowledge as
necessary. To evaluate the response in alignment with this additive scoring model, we'll
systematically attribute points based on the outlined criteria."""

# Reference-guided grading (MT-Bench's idea) on the same additive scale and reply format.
REFERENCE_PROMPT = """Review the user's question, a reference answer that is known to be correct, and
a response to grade. Compare the response with the reference answer and use the additive
5-point scoring system described below:
- Add 1 point if the response is relevant to the user's question.
- Add another point if its main claim is consistent with the reference answer.
- Award a third point if it reaches the same final answer as the reference answer.
- Grant a fourth point if nothing in it contradicts the reference answer.
- Bestow a fifth point if it is as correct and complete as the reference answer and states
it clearly, without extraneous information.

User: {question}
<reference>{reference}</reference>
<response>{response}</response>

After comparing the response with the reference answer:
- Briefly justify your total score, up to 100 words.
- Conclude with the score using the format: "Score: <total points>\""""


def _variant(text: str, *swaps: tuple[str, str]) -> str:
    """`text` with each (old, new) swapped once: a prompt's twin for a conversation."""
    for old, new in swaps:
        if old not in text:
            raise ValueError(f"the judge prompt has no {old!r} to swap")
        text = text.replace(old, new, 1)
    return text


# The same prompts for a prompt that is a conversation (a system prompt, earlier turns): the
# conversation is shown as its transcript ("System: …", "User: …", "Assistant: …") and the
# responses are judged as replies to its last user message. A one-message prompt keeps the
# prompts above, word for word, so the judges keep their identities and rankings.
_CONVERSATION = "[The Start of the Conversation]\n{conversation}\n[The End of the Conversation]\n\n"
_TAGGED = "<conversation>\n{conversation}\n</conversation>\n"
PAIRWISE_CONVERSATION_SYSTEM = _variant(
    PAIRWISE_SYSTEM,
    (
        "to the user question displayed below",
        "to the last user message of the conversation displayed below, given everything said before it",
    ),
)
PAIRWISE_CONVERSATION_USER = _variant(
    PAIRWISE_USER,
    ("[User Question]\n{question}\n\n", _CONVERSATION),
    ("Which assistant's answer", "Which assistant's answer to the last user message"),
)
SCORE_CONVERSATION_PROMPT = _variant(
    SCORE_PROMPT,
    (
        "Review the user's question and the corresponding response",
        "Review the conversation, whose last user message the response answers,",
    ),
    ("User: {question}\n", _TAGGED),
)
REFERENCE_CONVERSATION_PROMPT = _variant(
    REFERENCE_PROMPT,
    (
        "Review the user's question, a reference answer",
        "Review the conversation, a reference answer to its last user message",
    ),
    ("User: {question}\n", _TAGGED),
)

# Where the expected-score judge starts the assistant's answer: the next token is the score.
ANSWER_START = "Score: "

_SCORE = re.compile(r"score\s*[:：]?\s*\**\s*(\d+(?:\.\d+)?)(?:\s*/\s*5)?", re.IGNORECASE)


def parse_score(reply: str, low: float = 0.0, high: float = 5.0) -> float | None:
    """The last "Score: <n>" in a reply, or None when there is none in [low, high]."""
    matches = _SCORE.findall(reply)
    if not matches:
        return None
    value = float(matches[-1])
    return value if low <= value <= high else None
