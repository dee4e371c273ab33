"""Where a self-rewarding iteration's new prompts come from.

By default M_t writes them itself, as in Yuan et al. (2024): shown 8 existing
prompts at a time (few-shot), it is asked for one new task. Replies are cleaned
up and de-duplicated against every prompt already stored and against each
other; a writing round that falls short is followed by another (up to
`max_rounds`). A model that cannot follow a few-shot instruction (the digit toy
world's tiny LM, say) takes its prompts from a JSON Lines pool file instead:
the next prompts in the file that are not stored yet.

M_t writes on its engine, its reply begun for it with "Task 9:" where the engine continues
a reply (in process); a server is asked the instruction alone, as a user's message (it cannot
be relied on to continue a reply, and `clean_reply` drops a "Task 9:" the model writes itself).
Each request is seeded by its round, its batch and its place in it, so a resumed step's first
requests are those asked before, answered from the request store.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from preflab.db.conversation import Messages, prompt_hash, user_turn
from preflab.db.models import Prompt
from preflab.db.store import chunks, content_hash
from preflab.errors import InputError
from preflab.lm.engines import Engine, Failed, Generate, Sampling

FEW_SHOT_PROMPT = """Below are {k} examples of tasks that users gave an AI assistant.

{examples}

Write one new task of the same kind that is different from all of them. Reply with the task only."""

# "Task 9:", "New task:", "**Task:**" and the like, before the task itself.
_LEADER = re.compile(r"^\s*(?:\*\*)?\s*(?:new\s+)?task(?:\s*\d+)?\s*:?\s*(?:\*\*)?\s*", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
MIN_CHARS, MAX_CHARS = 10, 2000


@dataclass
class WrittenPrompts:
    texts: list[str] = field(default_factory=list)
    requests: int = 0  # replies asked for
    unusable: int = 0  # empty, too short or too long
    duplicates: int = 0  # already stored, an example, or written twice
    unanswered: int = 0  # asked of a server that gave no reply (refused, or none after every retry)


# How a batch of requests is answered: (the examples each shows, the batch's seed) -> each reply, None for none.
Draw = Callable[[list[list[str]], int], list[str | None]]


def few_shot_message(examples: list[str]) -> str:
    shown = "\n\n".join(f"Task {i}: {text.strip()}" for i, text in enumerate(examples, start=1))
    return FEW_SHOT_PROMPT.format(k=len(examples), examples=shown)


def draw_with(engine: Engine, *, max_new_tokens: int, temperature: float, top_p: float) -> Draw:
    """Replies from M_t's engine (`preflab.lm.engines`), each request told apart by its index, the reply begun for
    the model ("Task 9:") where the engine continues one."""

    def draw(shown: list[list[str]], seed: int) -> list[str | None]:
        sampling = Sampling(max_new_tokens, temperature, top_p, seed)
        # Begun for it, the reply continues the list with a task instead of talking about one: small models
        # follow the pattern far better than the instruction.
        asks = [
            Generate(few_shot_message(s), sampling, index=i, answer_start=f"Task {len(s) + 1}:")
            for i, s in enumerate(shown)
        ]
        return [None if isinstance(a, Failed) else a.text for a in engine.generate(asks)]

    return draw


def clean_reply(reply: str) -> str | None:
    """The task in a reply: its first paragraph without a "Task N:" label or quotes; None if unusable."""
    # Control characters (NUL above all: Postgres refuses it in text) are never part of a task.
    text = _CONTROL.sub("", reply).strip()
    text = _LEADER.sub("", text, count=1)
    lines = [line.strip() for line in re.split(r"\n\s*\n", text, maxsplit=1)[0].splitlines() if line.strip()]
    # A lead-in ("Here is a new task:") on a line of its own is not the task.
    while len(lines) > 1 and lines[0].endswith(":"):
        lines.pop(0)
    # The model may go on listing tasks ("… Task 10: …"): keep the first.
    text = re.split(r"\s*\bTask\s*\d+\s*:", " ".join(lines), maxsplit=1)[0].strip()
    if len(text) > 1 and text[0] in '"“' and text[-1] in '"”':  # the whole task in quotes
        text = text[1:-1].strip()
    if not MIN_CHARS <= len(text) <= MAX_CHARS:
        return None
    return text


def _seed(base: int, iteration: int, round_: int) -> int:
    digest = hashlib.sha256(f"prompts:{base}:{iteration}:{round_}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def write_prompts(
    draw: Draw,
    examples: list[str],
    n: int,
    *,
    shots: int = 8,
    seed: int = 0,
    iteration: int = 0,
    batch_size: int = 8,
    max_rounds: int = 3,
    is_new: Callable[[list[str]], list[bool]],
    on_batch: Callable[[list[str]], None] | None = None,
) -> WrittenPrompts:
    """Ask the model for `n` new prompts, each request showing `shots` examples drawn at random.

    Args:
        draw: how a batch of requests is answered (`draw_with`).
        examples: the prompts shown (at least one).
        is_new: tells, for a list of texts, which are not stored yet (checked per batch).
        on_batch: called with each batch of new prompts, so the caller can store them as they come.
    """
    if not examples:
        raise InputError("there are no prompts to show as examples; import some with `preflab import prompts`")
    out = WrittenPrompts()
    seen = {content_hash(e) for e in examples}
    for round_ in range(max_rounds):
        missing = n - len(out.texts)
        if missing <= 0:
            break
        rng = random.Random(_seed(seed, iteration, round_))
        # Ask for a few more than needed: some replies are unusable or repeat a stored prompt.
        requests = [rng.sample(examples, min(shots, len(examples))) for _ in range(missing + (missing + 3) // 4)]
        for start in range(0, len(requests), batch_size):
            if len(out.texts) >= n:
                break
            part = requests[start : start + batch_size]
            replies = draw(part, _seed(seed, iteration, round_ * 100_000 + start))
            out.requests += len(part)
            fresh: list[str] = []
            for reply in replies:
                if reply is None:
                    out.unanswered += 1
                    continue
                text = clean_reply(reply)
                if text is None:
                    out.unusable += 1
                    continue
                h = content_hash(text)
                if h in seen:
                    out.duplicates += 1
                    continue
                seen.add(h)
                fresh.append(text)
            flags = is_new(fresh) if fresh else []
            kept = [t for t, ok in zip(fresh, flags) if ok][: n - len(out.texts)]
            out.duplicates += len(fresh) - len([t for t, ok in zip(fresh, flags) if ok])
            if kept:
                out.texts.extend(kept)
                if on_batch:
                    on_batch(kept)
    return out


def prompt_key(prompt: str | Messages) -> str:
    """The content hash a prompt is stored under: a user's message (text) or a conversation (messages)."""
    return prompt_hash(user_turn(prompt) if isinstance(prompt, str) else prompt)


def stored_hashes(session: Session, hashes: list[str]) -> set[str]:
    """Which of these content hashes are stored prompts."""
    found: set[str] = set()
    for part in chunks(list(dict.fromkeys(hashes))):
        found.update(session.scalars(select(Prompt.content_hash).where(Prompt.content_hash.in_(part))))
    return found


def pool_prompts(
    path: str | Path, n: int, is_new: Callable[[list], list[bool]]
) -> list[tuple[str | Messages, str | None]]:
    """The next `n` (prompt, reference) of a JSON Lines pool file that are not stored yet, in file order.

    A prompt is its text, or its messages when it is a conversation (kept whole: the
    policy answers it with every message of its history).
    """
    from preflab.db.conversation import compact
    from preflab.db.ingest.jsonl import open_jsonl, parse_prompt
    from preflab.errors import Invalid

    out: list[tuple[str | Messages, str | None]] = []
    batch: list[tuple[str | Messages, str | None]] = []

    def flush() -> None:
        flags = is_new([text for text, _ in batch])
        out.extend(item for item, ok in zip(batch, flags) if ok)
        batch.clear()

    with open_jsonl(path) as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = parse_prompt(line)
            except Invalid as exc:
                raise InputError(f"{path} line {number}: {exc}") from None
            batch.append((compact(record.prompt), record.reference))
            if len(batch) >= 500:
                flush()
                if len(out) >= n:
                    break
    if batch:
        flush()
    unique = list({prompt_key(prompt): (prompt, ref) for prompt, ref in out}.values())
    return unique[:n]
