"""Grading by several criteria (`preflab judge score --criteria helpfulness,harmlessness`).

On a server that holds replies to a JSON schema (vLLM's structured output, a hosted API's `response_format`),
with the sampled method, each response is asked once for every criterion: the reply is a JSON object of one
0–5 score per criterion (`TOGETHER_PROMPT`, `schema`). Each criterion is then its own judge run, as with
`--criterion`: one AI annotator per criterion, its rankings carrying it. The runs ask the same requests, so the
first pays for them and the others read them back from the store (`Engine.stores_answers`): one request per
response and sample in all. A reply that is not such an object is a parse failure, asked again, never a 0.

Elsewhere (in this process, a server without structured output, or the expected method, which reads one
token) each criterion is asked on its own, with its rubric (`criteria.score_prompt`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import replace

from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.db.conversation import is_multi_turn, transcript
from preflab.labelling.judges.base import JudgeRun, JudgeSummary, ReadBudget, judge_prompts
from preflab.labelling.judges.identity import identity
from preflab.labelling.judges.score import SCORES, AskForm, ScoreConfig, sampled_judge
from preflab.labelling.judges.table import JUDGES
from preflab.labelling.selection import PromptCandidates
from preflab.lm.engines import Engine

TOGETHER_PROMPT = """Review the {asked} and the response below. Judge the response by each of these criteria
separately, each on its own, from 0 (fails it entirely) to 5 (meets it fully):
{rubrics}

{shown}<response>{response}</response>

Reply with a JSON object that gives each criterion its score, an integer from 0 to 5: {example}"""


def schema(names: list[str]) -> dict:
    """The JSON object of one integer score (0-5) per criterion, each required."""
    score = {"type": "integer", "minimum": SCORES[0], "maximum": SCORES[-1]}
    return {
        "type": "object",
        "properties": dict.fromkeys(names, score),
        "required": list(names),
        "additionalProperties": False,
    }


def together_messages(
    item: PromptCandidates, response: str, names: list[str], rubrics: dict[str, str], with_reference: bool
) -> list[dict[str, str]]:
    """The one user message asking for every criterion's score of `response`."""
    turns = item.history
    if is_multi_turn(turns):
        asked, shown = (
            "conversation, whose last user message the response answers,",
            (f"<conversation>\n{transcript(turns)}\n</conversation>\n"),
        )
    else:
        asked, shown = "user's question", f"User: {turns[0]['content']}\n"
    if with_reference:
        asked += " a reference answer known to be correct,"
        shown += f"<reference>{item.reference}</reference>\n"
    text = TOGETHER_PROMPT.format(
        asked=asked,
        rubrics="\n".join(f"- {name}: {rubrics[name]}" for name in names),
        shown=shown,
        response=response,
        example=json.dumps(dict.fromkeys(names, "<0-5>")),
    )
    return [{"role": "user", "content": text}]


def reader(name: str) -> Callable[[str], float | None]:
    """A reply's score for criterion `name`: its JSON object's integer 0-5 under that key (None: not there)."""

    def read(text: str) -> float | None:
        try:
            value = json.loads(text).get(name)
        except (ValueError, AttributeError):
            return None
        ok = isinstance(value, int) and not isinstance(value, bool) and SCORES[0] <= value <= SCORES[-1]
        return float(value) if ok else None

    return read


def judge_criteria(
    sessions: sessionmaker[Session],
    kind: str,
    engine: Engine,
    config: ScoreConfig,
    prompt_ids: list[int] | None = None,
    candidate_model: str | None = None,
    reporter: Reporter = SILENT,
    budget: ReadBudget | None = None,
) -> list[JudgeSummary]:
    """One judge run per criterion of `config.criteria`, asked together where the engine can (see the module)."""
    names = config.names()
    together = engine.offers_json() and config.method == "sampled"
    with_reference = JUDGES[kind].needs_reference
    rubrics = {name: replace(config, criterion=name, criteria=None).rubric() for name in names}
    asked_with = {name: hashlib.sha256(rubrics[name].encode()).hexdigest()[:16] for name in names}
    summaries = []
    for name in names:
        one = replace(config, criterion=name, criteria=None)
        named = identity(kind, one)
        if together:
            form = AskForm(
                lambda item, text: together_messages(item, text, names, rubrics, with_reference),
                schema(names),
                reader(name),
            )
            named = {**named, "asked_with": asked_with, "prompt_sha256": _sha(TOGETHER_PROMPT)}
            judge = sampled_judge(engine, one, with_reference, form)
        else:
            judge = JUDGES[kind].on_engine(engine, one)
        summary = judge_prompts(
            sessions,
            JudgeRun.of(kind, engine.name, one, named),
            judge,
            prompt_ids,
            candidate_model,
            with_reference,
            max(8, engine.concurrency // 2),
            reporter,
            spent_since(engine) if engine.stores_answers else None,
            budget,
        )
        summaries.append(summary)
    return summaries


def spent_since(engine: Engine) -> Callable[[], dict]:
    """What the engine asks and spends from now on (`Engine.spent`, less what it had): one run's share."""
    from preflab.db.requests import ENGINE_SUMS

    before = engine.spent()

    def spent() -> dict:
        now = engine.spent()
        out = {**now, **{name: round((now.get(name) or 0) - (before.get(name) or 0), 6) for name in ENGINE_SUMS}}
        out["requests_per_s"] = round(out["requests"] / out["seconds"], 3) if out["seconds"] else None
        return out

    return spent


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
