"""Running a judge of any kind over the stored candidates: `judge_candidates`, and the `judge` job."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.labelling.judges.base import JudgeResult, JudgeRun, JudgeSummary, ReadBudget, judge_prompts, run_measures
from preflab.labelling.judges.engine_run import judge_on_engine
from preflab.labelling.judges.identity import identity
from preflab.labelling.judges.table import JUDGES
from preflab.labelling.selection import PromptSelection, prompts_from_file, selected_prompt_ids
from preflab.lm.engines import EngineConfig
from preflab.lm.names import ModelCache, load_named_model, resolve_model


def make_judge(kind: str, model, tokenizer, config):
    """The judge function of `kind`: a batch of prompts' candidates in, one judgement per prompt out."""
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
    """Rank the candidates of every prompt this judge has not ranked yet.

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
    run = JudgeRun(kind, model_name, identity(kind, config))
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
    """The `judge KIND` job: load the judge model, rank what it has not ranked, and report on it.

    Args:
        kind, config: the judge and its config dataclass (`JUDGES[kind].config`).
        model_name: `--model NAME` of the judge (for `reward-model`, the reward model); several: a panel
            (`preflab.labelling.judges.engine_run`).
        prompts: a JSON Lines prompts file: judge only its prompts (imported first).
        candidates_from: judge only the candidates this model (any name it goes by) generated.
        selection: which stored prompts (by id, split, source, shard); its limit is not read.
        engine: where the model runs (`--engine openai`: on a server); None: in this process.
        cache: models already loaded by the calling job (the pipeline loads its model once).
        budget: the share of unreadable replies past which it stops (`base.ReadBudget`); None: never.

    The result's measures are this run's rankings' (`base.run_measures`).
    """
    prompt_ids = prompts_from_file(sessions, prompts) if prompts else None
    with sessions.begin() as session:
        prompt_ids = selected_prompt_ids(session, selection, prompt_ids)
        if candidates_from:
            candidates_from = resolve_model(session, candidates_from, record=False)[0]
    names = [model_name] if isinstance(model_name, str) else list(model_name)
    if len(names) > 1 or (engine is not None and engine.engine != "transformers") or _served(names[0]):
        return judge_on_engine(
            sessions,
            kind,
            config,
            names,
            engine or EngineConfig(),
            prompt_ids=prompt_ids,
            candidates_from=candidates_from,
            cache=cache,
            reporter=reporter,
            budget=budget,
        )
    model_name = names[0]
    named = load_named_model(sessions, model_name, record=False, scorer=JUDGES[kind].scorer, cache=cache)
    summary = judge_candidates(
        sessions, kind, named.model, named.tokenizer, named.label, config, prompt_ids, candidates_from, reporter, budget
    )
    return JudgeResult(named.label, summary, run_measures(sessions, summary))
