"""`train eval`: how good is a trained model version on held-out data?

A reward model or pair ranker: the reward-model bench on a dataset version's
test split (`preflab.training.reward_eval`: accuracy with bootstrap intervals,
per category, annotator kind and margin, length bias, position, and `--compare`
with another version on the same pairs). A policy: its win rate against the model it was trained from, on the held-out
prompts (`Prompt.split == "test"`): both answer each prompt (greedy by default),
a judge from `preflab.labelling.judges` compares the two answers, and a tie
counts half; a held-out conversation is answered and judged with its whole
history. `evaluate_model_version` runs either and stores the report with the
model version.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.db.conversation import Messages, compact, stored_prompt
from preflab.db.models import DatasetVersion, ModelVersion, Prompt, TrainingRun
from preflab.errors import ConfigError, InputError, NotFound
from preflab.labelling.judges.table import JUDGES

if TYPE_CHECKING:
    from preflab.training.reward_eval.job import RewardEval

# Judges that compare answers on their own; the reference judge grades against a prompt's reference answer.
ANSWER_JUDGES = tuple(kind for kind, judge in JUDGES.items() if not judge.needs_reference)


@dataclass
class EvalConfig:
    """How `train eval` evaluates a model version (reward models use only the first and last fields)."""

    dataset_version: str | None = field(
        default=None,
        metadata={"help": "Reward models: the dataset version whose test split to use (default: the one trained on)."},
    )
    judge: str = field(
        default="pairwise",
        metadata={"help": "Policies: the judge that compares the two answers.", "choices": ANSWER_JUDGES},
    )
    judge_model: str | None = field(
        default=None,
        metadata={
            "help": "Policies: the judge's model (a reward model version for reward-model);"
            " default: the global --model."
        },
    )
    against: str | None = field(
        default=None, metadata={"help": "Policies: compare with this model instead of the parent."}
    )
    limit: int | None = field(default=None, metadata={"help": "Policies: at most this many held-out prompts."})
    max_new_tokens: int = field(default=128, metadata={"help": "Policies: longest answer, in tokens."})
    sample: bool = field(
        default=False,
        metadata={"help": "Policies: sample answers (temperature 0.7, top-p 0.9) instead of greedy decoding."},
    )
    seed: int = field(default=0, metadata={"help": "Policies: the sampling seed; reward models: the bootstrap's."})
    compare: str | None = field(
        default=None,
        metadata={
            "help": "Reward models: also score this reward model or pair ranker on the same pairs, and give the "
            "difference with its interval and p-value."
        },
    )
    bootstrap: int = field(
        default=1000,
        metadata={"help": "Reward models: bootstrap rounds (resampling prompts) for the 95% intervals; 0: none."},
    )
    batch_size: int = field(default=8, metadata={"help": "Sequences per forward pass."})

    def __post_init__(self) -> None:
        if self.judge not in ANSWER_JUDGES:
            raise ConfigError(
                f"--judge must be one of {', '.join(ANSWER_JUDGES)} (the reference judge grades "
                f"against reference answers), got {self.judge!r}"
            )
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"--limit must be at least 1, got {self.limit}")
        if self.bootstrap < 0:
            raise ConfigError(f"--bootstrap must be 0 or more, got {self.bootstrap}")
        if self.max_new_tokens < 1 or self.batch_size < 1:
            raise ConfigError("--max-new-tokens and --batch-size must be at least 1")


def find_model_version(session: Session, name_or_id: str) -> ModelVersion:
    condition = ModelVersion.name == name_or_id
    if name_or_id.isdigit():
        condition = or_(condition, ModelVersion.id == int(name_or_id))
    version = session.scalars(select(ModelVersion).where(condition).order_by(ModelVersion.id.desc())).first()
    if version is None:
        raise NotFound(f"there is no model version {name_or_id!r}")
    if not version.path:
        raise NotFound(f"model version {version.name} has no saved weights to evaluate")
    return version


def _run_of(session: Session, version: ModelVersion) -> TrainingRun | None:
    return session.scalars(select(TrainingRun).where(TrainingRun.output_model_version_id == version.id)).first()


def dataset_for(session: Session, version: ModelVersion, name_or_id: str | None) -> DatasetVersion:
    """The named dataset version, else the one the model was trained on, else the newest."""
    from preflab.training.data import find_dataset_version

    if name_or_id:
        return find_dataset_version(session, name_or_id)
    run = _run_of(session, version)
    if run is not None and run.dataset_version_id:
        return session.get(DatasetVersion, run.dataset_version_id)
    found = session.scalars(select(DatasetVersion).order_by(DatasetVersion.id.desc())).first()
    if found is None:
        raise NotFound("there is no dataset version to evaluate on; run `preflab export` first")
    return found


def contradictions(split) -> tuple[int, float | None]:
    """(pairs whose opposite pair is in `split` too, the best accuracy any model can reach on it).

    Two rows of one prompt with the same two responses in opposite orders (two
    annotators who disagree, or a person and a judge) cannot both be scored
    right: at best the majority order of each such pair is.
    """
    from collections import Counter

    rows = Counter((p, repr(c), repr(r)) for p, c, r in zip(split["prompt_id"], split["chosen"], split["rejected"]))
    contradicting = best = 0
    for (p, c, r), n in rows.items():
        opposite = rows.get((p, r, c), 0)
        contradicting += n if opposite else 0
        if not opposite:
            best += n
        elif c < r:  # each opposed pair once: its majority order is the most a model can get right
            best += max(n, opposite)
    return contradicting, (best / len(split) if len(split) else None)


@dataclass
class PolicyEval:
    """What a policy evaluation needs from the database (read before any model is loaded)."""

    policy: str
    policy_path: str
    baseline: str
    baseline_path: str
    conversational: bool
    # (id, prompt, reference); the prompt as the model reads it: its text, or its messages (the whole history)
    prompts: list[tuple[int, str | Messages, str | None]] = field(default_factory=list)


def held_out_prompts(session: Session, query) -> list[tuple[int, str | Messages, str | None]]:
    """(id, prompt, reference) per row of `query`, the prompt as the model reads it: its text, or its messages.

    Args:
        query: selects `Prompt.id`, `Prompt.text`, `Prompt.messages` and `Prompt.reference`.
    """
    return [
        (pid, compact(stored_prompt(text, messages)), reference)
        for pid, text, messages, reference in session.execute(query)
    ]


def plan_policy_eval(
    session: Session, version: ModelVersion, against: str | None = None, limit: int | None = None
) -> PolicyEval:
    """The policy, the model it is compared with (its parent by default) and the held-out prompts."""
    from preflab.lm.loading import resolve_model_path
    from preflab.lm.names import resolve_model

    if against:
        label, location, _ = resolve_model(session, against, record=False)
    else:
        parent = session.get(ModelVersion, version.parent_id) if version.parent_id else None
        if parent is None or not (parent.path or parent.base_model):
            raise NotFound(f"model version {version.name} records no base model; name one with --against")
        label, location = parent.name, parent.path or parent.base_model
    run = _run_of(session, version)
    dataset = session.get(DatasetVersion, run.dataset_version_id) if run and run.dataset_version_id else None
    query = (
        select(Prompt.id, Prompt.text, Prompt.messages, Prompt.reference)
        .where(Prompt.split == "test")
        .order_by(Prompt.id)
    )
    if limit:
        query = query.limit(limit)
    prompts = held_out_prompts(session, query)
    if not prompts:
        raise InputError("there are no held-out prompts (split 'test'); export a dataset version first")
    return PolicyEval(
        version.name,
        version.path,
        label,
        str(resolve_model_path(location)),
        bool(dataset and (dataset.settings or {}).get("conversational")),
        prompts,
    )


def answer(
    model,
    tokenizer,
    prompts: list[str | Messages],
    conversational: bool,
    max_new_tokens: int,
    do_sample: bool,
    seed: int,
    batch_size: int,
) -> list[str]:
    """Each prompt's answer, formatted the way the policy was trained (chat template or plain text).

    A policy with a chat template of its own trained on chat messages, whatever its
    dataset's form (`preflab.training.data.for_model`); a prompt of messages (a
    conversation) always goes through the chat template, every message of it: plain
    text cannot hold a history.
    """
    from preflab.lm.loading import chat_prompt, has_chat_template
    from preflab.lm.sampling import generate_texts

    chat = conversational or has_chat_template(tokenizer)
    texts = [chat_prompt(tokenizer, p) if chat or not isinstance(p, str) else p for p in prompts]
    out: list[str] = []
    for start in range(0, len(texts), batch_size):
        out += [
            g.text
            for g in generate_texts(
                model,
                tokenizer,
                texts[start : start + batch_size],
                max_new_tokens=max_new_tokens,
                do_sample=do_sample,
                seed=seed + start,
            )
        ]
    return out


def win_rate(
    plan: PolicyEval, judge, max_new_tokens: int = 128, do_sample: bool = False, seed: int = 0, batch_size: int = 8
) -> dict[str, Any]:
    """Answer every held-out prompt with both models and let `judge` compare each pair of answers.

    Args:
        judge: a judge function (`Judge.make` of `preflab.labelling.judges.table.JUDGES`).
    """
    from preflab.labelling.selection import PromptCandidates
    from preflab.lm.loading import load_causal_lm

    prompts = [prompt for _, prompt, _ in plan.prompts]
    answers = {}
    for name, path in (("policy", plan.policy_path), ("baseline", plan.baseline_path)):
        model, tokenizer = load_causal_lm(path)
        answers[name] = answer(
            model, tokenizer, prompts, plan.conversational, max_new_tokens, do_sample, seed, batch_size
        )
        del model
    wins = losses = ties = 0
    items = [
        PromptCandidates.of(pid, prompt, reference, [0, 1], [mine, theirs])
        for (pid, prompt, reference), mine, theirs in zip(plan.prompts, answers["policy"], answers["baseline"])
    ]
    to_judge = [item for item in items if item.texts[0] != item.texts[1]]
    ties += len(items) - len(to_judge)  # the same answer: nothing to prefer
    for start in range(0, len(to_judge), batch_size):
        for scores, _ in judge(to_judge[start : start + batch_size]):
            mine, theirs = scores.get(0), scores.get(1)
            if mine is None or theirs is None or mine == theirs:
                ties += 1
            elif mine > theirs:
                wins += 1
            else:
                losses += 1
    n = len(items)
    return {
        "model_version": plan.policy,
        "against": plan.baseline,
        "prompts": n,
        "wins": wins,
        "losses": losses,
        "ties": ties,
        "win_rate": (wins + 0.5 * ties) / n,
        "identical_answers": len(items) - len(to_judge),
    }


def evaluate_model_version(
    sessions: sessionmaker[Session],
    name: str,
    config: EvalConfig,
    default_judge_model: str,
    reporter: Reporter = SILENT,
) -> dict[str, Any]:
    """Evaluate a model version on held-out data and store the report in its metrics (under "eval").

    The database is read, then the models run with no transaction open, then the
    report is written in a second, short transaction.

    Args:
        name: the model version's name or id.
        default_judge_model: the policy judge's model when `config.judge_model` is not set.

    Returns:
        The report: held-out accuracy for a reward model, win rate for a policy.
    """
    from preflab.lm.names import load_named_model
    from preflab.training.reward_eval.job import SCORERS, plan_reward_eval

    with sessions.begin() as session:
        version = find_model_version(session, name)
        kind = version.kind
        if kind in SCORERS:
            other = find_model_version(session, config.compare) if config.compare else None
            reward_plan = plan_reward_eval(
                session, version, dataset_for(session, version, config.dataset_version), other
            )
        else:
            if config.compare:
                raise ConfigError(
                    f"--compare compares reward models and pair rankers, and {version.name} is a "
                    f"{kind} model: compare a policy with another model with --against"
                )
            version_id = version.id
            plan = plan_policy_eval(session, version, config.against, config.limit)
    if kind in SCORERS:
        return _evaluate_scorers(sessions, reward_plan, config, reporter)
    judge_model = load_named_model(
        sessions, config.judge_model or default_judge_model, record=False, scorer=JUDGES[config.judge].scorer
    )
    judge = make_policy_judge(config, judge_model)
    reporter.note(
        f"{plan.policy} and {plan.baseline} answer {len(plan.prompts):,} held-out prompts; "
        f"the {config.judge} judge ({judge_model.label}) compares them"
    )
    report = win_rate(plan, judge, config.max_new_tokens, config.sample, config.seed, config.batch_size)
    report |= {"judge": config.judge, "judge_model": judge_model.label}
    _store(sessions, version_id, report)
    return report


def _store(sessions: sessionmaker[Session], version_id: int, report: dict[str, Any]) -> None:
    """The report into its model version's metrics (under "eval"), in a short transaction of its own."""
    with sessions.begin() as session:
        row = session.get(ModelVersion, version_id)
        row.metrics = {**(row.metrics or {}), "eval": report}


def _evaluate_scorers(
    sessions: sessionmaker[Session], plan: RewardEval, config: EvalConfig, reporter: Reporter
) -> dict[str, Any]:
    """The reward-model bench of a `plan_reward_eval` plan, stored with its model version."""
    from preflab.training.reward_eval.job import evaluate_reward

    contradicting, ceiling = contradictions(plan.test)
    if contradicting:
        reporter.note(
            f"warning: {contradicting:,} of the {len(plan.test):,} held-out pairs of {plan.dataset} "
            f"contradict another (the same two responses in the opposite order), so no model scores above "
            f"{ceiling:.3f}; export with --annotators human-first (the default) or aggregate with "
            "`preflab pairs build --aggregate majority`"
        )
    report = evaluate_reward(
        plan, rounds=config.bootstrap, seed=config.seed, batch_size=config.batch_size, reporter=reporter
    )
    report |= {"heldout_contradicting_pairs": contradicting, "heldout_accuracy_ceiling": ceiling}
    _store(sessions, plan.version_id, report)
    return report


def make_policy_judge(config: EvalConfig, judge_model):
    """The judge function of `config.judge` (its entry in the table of judges) on a loaded model."""
    judge = JUDGES[config.judge]
    return judge.make(judge_model.model, judge_model.tokenizer, judge.config(batch_size=config.batch_size))
