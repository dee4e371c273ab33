"""Running a judge over the stored candidates: the `judge KIND` job, a panel of judges, a judge on an open engine.

A judge that reads a causal LM runs through its engine (`preflab.lm.engines`), in this process or on a
server: one path. Each judge (each member of a panel) is its own AI annotator, named by its engine's
model (`judge:pairwise:<run>:<model>`; on a server `openai:<served model>`), and ranks what it has not
ranked yet (`base.judge_prompts`); where the engine stores its answers, a re-run or another judge asking
the same thing pays nothing, and the run's spend (requests, tokens, cache hits, retries, errors, wall
time, cost) is added to what is stored on the annotator. A panel then ranks from its members' stored
rankings (`panel.panel_judge`): one more annotator, naming its members. A judge whose model is a sequence
classifier (reward-model, pair-ranker) runs in this process, on its model alone.

Members are given as `--model NAME` (on `--engine`), `--model NAME@URL` (on a server of its own), or
`--model FILE.toml` listing them:

    [[member]]
    model = "llama-3.1-8b"
    api_base = "http://gpu-1:8000/v1"
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import tomllib
from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.errors import ConfigError
from preflab.labelling.judges.base import (
    JudgeResult,
    JudgeRun,
    JudgeSummary,
    ReadBudget,
    judge_prompts,
    record_stats,
    run_measures,
)
from preflab.labelling.judges.identity import identity
from preflab.labelling.judges.table import JUDGES
from preflab.labelling.selection import PromptSelection, prompts_from_file, selected_prompt_ids
from preflab.lm.engines import Engine, EngineConfig, open_engine
from preflab.lm.names import ModelCache, load_named_model, resolve_model

# Panels rank from stored member rankings: read this many prompts at a time.
PANEL_BATCH = 64


def make_judge(kind: str, model, tokenizer, config):
    """The judge function of `kind` on a model loaded here: a batch of prompts' candidates in, one judgement out."""
    return JUDGES[kind].make(model, tokenizer, config)


def judge_candidates(
    sessions: sessionmaker[Session],
    kind: str,
    model,
    tokenizer,
    model_name: str,
    config,
    prompt_ids: list[int] | None = None,
    candidate_model: str | None = None,
    reporter: Reporter = SILENT,
    budget: ReadBudget | None = None,
) -> JudgeSummary:
    """Rank the candidates of every prompt this judge has not ranked yet, with its model loaded here.

    Args:
        sessions: rankings are written a batch of prompts per transaction.
        kind: a key of `JUDGES`.
        model, tokenizer: the loaded judge model (a causal LM, or a sequence classifier
            for a `scorer` judge).
        model_name: the judge model's label, stored on the annotator.
        config: the kind's config dataclass (`JUDGES[kind].config`).
        candidate_model: judge only the candidates this model generated.
        budget: stop once too many of its candidates could not be read (`base.ReadBudget`); None: never.
    """
    run = JudgeRun.of(kind, model_name, config, identity(kind, config))
    return judge_prompts(
        sessions,
        run,
        make_judge(kind, model, tokenizer, config),
        prompt_ids,
        candidate_model,
        require_reference=JUDGES[kind].needs_reference,
        reporter=reporter,
        budget=budget,
    )


def judge_on(
    sessions: sessionmaker[Session],
    kind: str,
    engine: Engine,
    config,
    prompt_ids: list[int] | None = None,
    candidate_model: str | None = None,
    reporter: Reporter = SILENT,
    budget: ReadBudget | None = None,
) -> JudgeSummary:
    """Rank with the judge of `kind` (one that reads a causal LM) on an engine already open; its annotator names
    the engine's model, and what a server was asked is stored with it (`base.JudgeSummary`)."""
    if kind == "likelihood":
        engine.check_likelihood()
    run = JudgeRun.of(kind, engine.name, config, identity(kind, config))
    return judge_prompts(
        sessions,
        run,
        JUDGES[kind].on_engine(engine, config),
        prompt_ids,
        candidate_model,
        JUDGES[kind].needs_reference,
        max(8, engine.concurrency // 2),  # prompts a batch: enough asks to keep a server's slots busy
        reporter,
        engine.spent if engine.stores_answers else None,
        budget,
    )


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
            out += [engine.for_model(str(m["model"]), m.get("api_base"), m.get("engine")) for m in listed]
            continue
        name, at, url = given.rpartition("@")
        out.append(
            engine.for_model(name, url) if at and url.startswith(("http://", "https://")) else engine.for_model(given)
        )
    return out


def _served(name: str) -> bool:
    """`NAME@URL` (a model on that server) or a TOML file of a panel's members."""
    return "@http" in name or name.endswith(".toml")


def run_judge(
    sessions: sessionmaker[Session],
    kind: str,
    config,
    model_name: str | Sequence[str],
    *,
    prompts: str | Path | None = None,
    candidates_from: str | None = None,
    selection: PromptSelection = PromptSelection(),
    engine: EngineConfig | None = None,
    cache: ModelCache | None = None,
    reporter: Reporter = SILENT,
    budget: ReadBudget | None = ReadBudget(),
) -> JudgeResult:
    """The `judge KIND` job: open the judge's model, rank what it has not ranked, and report on it.

    Each member of a panel stops once too many of its replies could not be read (`budget`); the panel reads only
    what its members stored. The result's measures are this run's rankings' (`base.run_measures`).

    Args:
        kind, config: the judge and its config dataclass (`JUDGES[kind].config`).
        model_name: `--model NAME` of the judge (for `reward-model`, the reward model); several: a panel.
        prompts: a JSON Lines prompts file: judge only its prompts (imported first).
        candidates_from: judge only the candidates this model (any name it goes by) generated.
        selection: which stored prompts (by id, split, source, shard); its limit is not read.
        engine: where a causal LM runs (`--engine openai`: on a server); None: in this process. A sequence
            classifier always runs here.
        cache: models already loaded by the calling job (the pipeline loads its model once).
        budget: the share of unreadable replies past which it stops (`base.ReadBudget`); None: never.
    """
    prompt_ids = prompts_from_file(sessions, prompts) if prompts else None
    with sessions.begin() as session:
        prompt_ids = selected_prompt_ids(session, selection, prompt_ids)
        if candidates_from:
            candidates_from = resolve_model(session, candidates_from, record=False)[0]
    names = [model_name] if isinstance(model_name, str) else list(model_name)
    cache = cache or ModelCache()
    if JUDGES[kind].scorer:
        if len(names) > 1 or _served(names[0]):
            raise ConfigError(f"the {kind} judge runs in this process only (its model is no causal LM)")
        heads = hasattr(config, "head")  # the reward-model judge reads a model of several heads too
        named = load_named_model(sessions, names[0], record=False, scorer=True, heads=heads, cache=cache)
        summary = judge_candidates(
            sessions,
            kind,
            named.model,
            named.tokenizer,
            named.label,
            config,
            prompt_ids,
            candidates_from,
            reporter,
            budget,
        )
        return JudgeResult(named.label, summary, run_measures(sessions, summary))
    with ExitStack() as stack:
        engines = []
        for member in members_of(names, engine or EngineConfig()):
            opened = stack.enter_context(
                open_engine(member, sessions, cache=cache, batch_size=config.batch_size, record=False)
            )
            opened.check()  # loaded, or the server looked at (the likelihood judge's log-probabilities too),
            if kind == "likelihood":  # before any member is paid for
                opened.check_likelihood()
            engines.append(opened)
        if getattr(config, "criteria", None):
            return _by_criteria(sessions, kind, config, engines, prompt_ids, candidates_from, reporter, budget)
        summaries = [
            judge_on(sessions, kind, member, config, prompt_ids, candidates_from, reporter, budget)
            for member in engines
        ]
        labels = [member.name for member in engines]
    if len(labels) == 1:
        return JudgeResult(labels[0], summaries[0], run_measures(sessions, summaries[0]))
    return _panel(sessions, kind, config, labels, summaries, prompt_ids, candidates_from, reporter)


def _by_criteria(sessions, kind, config, engines, prompt_ids, candidates_from, reporter, budget) -> JudgeResult:
    """`--criteria a,b`: a run per criterion (`together.judge_criteria`); the result is the first's, with every
    criterion's summary and measures under "criteria"."""
    from preflab.labelling.judges.together import judge_criteria

    if len(engines) > 1:
        raise ConfigError("a panel judges one criterion at a time: give it --criterion NAME, once per criterion")
    (engine,) = engines
    summaries = judge_criteria(sessions, kind, engine, config, prompt_ids, candidates_from, reporter, budget)
    first = summaries[0]
    first.extra["criteria"] = [{**s.as_dict(), "report": run_measures(sessions, s)} for s in summaries]
    return JudgeResult(engine.name, first, first.extra["criteria"][0]["report"])


def _panel(sessions, kind, config, labels, summaries, prompt_ids, candidates_from, reporter) -> JudgeResult:
    """The panel's ranking from its members' stored rankings, and what its members asked and cost."""
    from preflab.labelling.judges.panel import panel_judge, panel_label

    label = panel_label(labels)
    runs = [JudgeRun.of(kind, member, config, identity(kind, config)) for member in labels]
    run = JudgeRun.of(kind, label, config, {**identity(kind, config), "members": [r.run_id for r in runs]})
    summary = judge_prompts(
        sessions,
        run,
        panel_judge(sessions, kind, config, runs, summaries),
        prompt_ids,
        candidates_from,
        JUDGES[kind].needs_reference,
        PANEL_BATCH,
        reporter,
    )
    summary.extra["members"] = [{"model": m, **s.as_dict()} for m, s in zip(labels, summaries)]
    if any("engine" in s.extra for s in summaries):
        # What the panel asked and cost is what its members did: this run's, and all their runs'.
        summary.extra["engine"] = added([s.extra["engine"] for s in summaries if "engine" in s.extra], label)
        totals = added([s.extra["engine_total"] for s in summaries if "engine_total" in s.extra], label)
        with sessions.begin() as session:
            summary.extra["engine_total"] = record_stats(session, summary.annotator_id, totals, replace=True)
    return JudgeResult(label, summary, run_measures(sessions, summary))


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
