"""A judge on a server, or a panel of judges: the `judge KIND` job where `--engine openai` or several `--model`s.

Each judge (each member of a panel) is its own AI annotator, named by its engine and model
(`judge:pairwise:<run>:openai:<served model>`), and ranks what it has not ranked yet, as a judge
in process does (`base.judge_prompts`); on a server every answer is stored as it arrives
(`preflab.lm.engines`), so a re-run or another judge asking the same thing pays nothing. The
run's engine stats (requests, tokens, cache hits, retries, errors, wall time, cost) are added to
those stored on the annotator. A panel then ranks from its members' stored rankings
(`panel.panel_judge`): one more annotator, naming its members.

Members are given as `--model NAME` (on `--api-base`), `--model NAME@URL` (on a server of its
own), or `--model FILE.toml` listing them:

    [[member]]
    model = "llama-3.1-8b"
    api_base = "http://gpu-1:8000/v1"
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib
from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.errors import ConfigError
from preflab.labelling.judges.base import JudgeResult, JudgeRun, ReadBudget, judge_prompts, record_stats, run_measures
from preflab.labelling.judges.identity import identity
from preflab.labelling.judges.table import JUDGES
from preflab.lm.engines import EngineConfig
from preflab.lm.names import ModelCache

# Panels rank from stored member rankings: read this many prompts at a time.
PANEL_BATCH = 64


@dataclass
class Member:
    """One judge of a run: its model's label (as its annotator names it), its judge function, its stats."""

    label: str
    judge: Any
    stats: Any = None  # () -> EngineStats.as_dict(), on a server
    batch: int = 8  # prompts per batch


def members_of(models: Sequence[str], engine: EngineConfig) -> list[EngineConfig]:
    """One engine config per member: `NAME`, `NAME@URL` or a TOML file of `[[member]]` tables."""
    out: list[EngineConfig] = []
    for given in models:
        if given.endswith(".toml") and Path(given).is_file():
            try:
                listed = tomllib.loads(Path(given).read_text(encoding="utf-8")).get("member") or []
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"{given} is not valid TOML: {exc}") from None
            if not listed or not all(isinstance(m, dict) and m.get("model") for m in listed):
                raise ConfigError(f'{given} lists no panel: give each member as [[member]] with model = "NAME"')
            out += [_member(engine, str(m["model"]), m.get("api_base"), m.get("engine")) for m in listed]
            continue
        name, at, url = given.rpartition("@")
        if at and url.startswith(("http://", "https://")):
            out.append(_member(engine, name, url, None))
        else:
            out.append(_member(engine, given, None, None))
    return out


def _member(engine: EngineConfig, model: str, url: str | None, kind: str | None) -> EngineConfig:
    kind = kind or ("openai" if url else engine.engine)
    return EngineConfig(
        **{
            **engine.__dict__,
            "engine": kind,
            "model": model,
            "api_base": url or (engine.api_base if kind == engine.engine else None),
        }
    )


def _open(
    stack: ExitStack, sessions: sessionmaker[Session], kind: str, config, engine: EngineConfig, cache: ModelCache
) -> Member:
    """A member ready to judge: on a server, checked (the model is there; prompt log-probabilities for
    the likelihood judge) before anything is paid for; in process, loaded."""
    from preflab.labelling.judges.on_engine import engine_judge
    from preflab.lm.engines import open_engine
    from preflab.lm.names import load_named_model

    if engine.engine == "openai":
        served = stack.enter_context(open_engine(engine, sessions))
        served.server()
        if kind == "likelihood":
            served.check_likelihood()
        return Member(served.name, engine_judge(kind, served, config), spent(served), max(8, engine.concurrency // 2))
    named = load_named_model(sessions, engine.model, record=False, cache=cache)
    return Member(named.label, JUDGES[kind].make(named.model, named.tokenizer, config))


def judge_on_engine(
    sessions: sessionmaker[Session],
    kind: str,
    config,
    models: Sequence[str],
    engine: EngineConfig,
    *,
    prompt_ids: list[int] | None = None,
    candidates_from: str | None = None,
    cache: ModelCache | None = None,
    reporter: Reporter = SILENT,
    budget: ReadBudget | None = None,
):
    """The `judge KIND` job for a judge on a server or a panel: rank, store the stats, report (`base.JudgeResult`).

    Each member stops once too many of its replies could not be read (`budget`); the panel reads only what its
    members stored. The measures are this run's rankings' (`base.run_measures`).
    """
    from preflab.labelling.judges.panel import panel_judge, panel_label

    if JUDGES[kind].scorer:
        raise ConfigError(f"the {kind} judge runs in this process only (its model is no causal LM)")
    configs = members_of(models, engine)
    cache = cache or ModelCache()
    needs_reference = JUDGES[kind].needs_reference
    with ExitStack() as stack:
        members = [_open(stack, sessions, kind, config, member, cache) for member in configs]
        runs, summaries = [], []
        for member in members:
            run = JudgeRun(kind, member.label, identity(kind, config))
            summaries.append(
                judge_prompts(
                    sessions,
                    run,
                    member.judge,
                    prompt_ids,
                    candidates_from,
                    needs_reference,
                    member.batch,
                    reporter,
                    member.stats,
                    budget,
                )
            )
            runs.append(run)
    if len(members) == 1:
        summary, label = summaries[0], members[0].label
    else:
        label = panel_label([m.label for m in members])
        run = JudgeRun(kind, label, {**identity(kind, config), "members": [r.run_id for r in runs]})
        summary = judge_prompts(
            sessions,
            run,
            panel_judge(sessions, kind, config, runs, summaries),
            prompt_ids,
            candidates_from,
            needs_reference,
            PANEL_BATCH,
            reporter,
        )
        summary.extra["members"] = [{"model": m.label, **s.as_dict()} for m, s in zip(members, summaries)]
        if any("engine" in s.extra for s in summaries):
            # What the panel asked and cost is what its members did: this run's, and all their runs'.
            summary.extra["engine"] = added([s.extra["engine"] for s in summaries if "engine" in s.extra], label)
            totals = added([s.extra["engine_total"] for s in summaries if "engine_total" in s.extra], label)
            with sessions.begin() as session:
                summary.extra["engine_total"] = record_stats(session, summary.annotator_id, totals, replace=True)
    return JudgeResult(label, summary, run_measures(sessions, summary))


def judge_on(
    sessions: sessionmaker[Session],
    kind: str,
    engine,
    config,
    prompt_ids: list[int] | None = None,
    candidate_model: str | None = None,
    reporter: Reporter = SILENT,
):
    """Rank with a judge of `kind` on an engine already open (a server's: self-reward's judging step);
    its annotator names the engine's model, its stats are stored with it (`base.JudgeSummary`)."""
    from preflab.labelling.judges.on_engine import engine_judge

    if kind == "likelihood":
        engine.check_likelihood()
    run = JudgeRun(kind, engine.name, identity(kind, config))
    return judge_prompts(
        sessions,
        run,
        engine_judge(kind, engine, config),
        prompt_ids,
        candidate_model,
        JUDGES[kind].needs_reference,
        max(8, engine.config.concurrency // 2),
        reporter,
        spent(engine),
    )


def spent(engine):
    """The engine's stats so far (`EngineStats.as_dict`) with the currency its prices were given in."""
    currency = getattr(getattr(engine, "config", None), "currency", None)
    return lambda: {**engine.stats.as_dict(), **({"currency": currency} if currency else {})}


def added(stats: list[dict[str, Any]], model: str) -> dict[str, Any]:
    """The members' stats of one run as the panel's: what the panel asked and cost is what its members did
    (in their currency, where they share one)."""
    from preflab.db.requests import ENGINE_SUMS

    out: dict[str, Any] = {"engine": "panel", "model": model, "runs": sum(int(s.get("runs") or 0) for s in stats)}
    for name in ENGINE_SUMS:
        out[name] = round(sum(s.get(name) or 0 for s in stats), 6)
    currencies = {s["currency"] for s in stats if s.get("currency") and (s.get("price_in") or s.get("price_out"))}
    if len(currencies) == 1:
        out["currency"] = currencies.pop()
    return out
