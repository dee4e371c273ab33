"""`preflab demo toy`: the digit world end to end, through preflab's own pipeline.

1. train a tiny causal LM on the base language (`preflab.training.demos.toy_world`);
2. sample candidates from it for a few hundred prompts;
3. a simulated annotator ranks them by its hidden preference (the first output
   digit is the last input digit + 1) and the rankings are imported as JSON Lines;
4. pairs are built, a dataset version exported (split by prompt);
5. a reward model (`train reward`) and a policy are trained on it: DPO on the
   pairs (`train dpo`), or, with `--method rl`, RL against the reward model
   (`train rl`: RLOO with R = R_RM − β·KL, the notebook's own last step);
6. the policy is compared with the base model on the held-out prompts.

The answer is known: the reward model should rank held-out pairs almost
perfectly, and the policy should move the preferred first digit from ≈ 1/4 to
≥ 0.9 while the later digits keep following the base rule.

`--world history` runs the world where the history matters instead
(`preflab.training.demos.history_world`): the instruction saying which digit to
start with is in the system turn, the rankings are imported as conversations and
DPO trains on the conversational export; on held-out conversations the policy
should follow the instruction ≥ 0.9 of the time, up from ≈ 1/4.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from dataclasses import asdict
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.settings import data_dir
from preflab.training.demos.toy_config import ToySettings

ANNOTATOR = "simulated-annotator"


def toy_rankings(base_path: Path, settings: ToySettings, out: Path) -> int:
    """Sample candidates from the base model and write the annotator's rankings as JSON Lines."""
    from transformers import AutoModelForCausalLM

    from preflab.training.demos import toy_world as toy

    rng = random.Random(settings.seed)
    prompts: dict[tuple, None] = {}
    while len(prompts) < settings.prompts:
        prompts[tuple(toy.sample_prompt(rng))] = None
    model = AutoModelForCausalLM.from_pretrained(base_path)
    outputs = toy.sample_outputs(model, list(prompts), settings.candidates, seed=settings.seed)
    lines = 0
    with out.open("w", encoding="utf-8") as handle:
        for i, (prompt, sampled) in enumerate(zip(prompts, outputs)):
            distinct = list(dict.fromkeys(tuple(o) for o in sampled if o))
            if len(distinct) < 2:
                continue
            record = {
                "prompt": toy.prompt_text(prompt),
                "responses": [toy.completion_text(o) for o in distinct],
                "ranking": toy.annotator_tiers(prompt, distinct),
                "annotator": ANNOTATOR,
                "annotator_kind": "human",
                "id": f"toy-{settings.seed}-{i}",
                "model": str(base_path),
            }
            handle.write(json.dumps(record) + "\n")
            lines += 1
    return lines


def run_toy(sessions: sessionmaker[Session], workdir: Path, settings: ToySettings, reporter: Reporter = SILENT) -> dict:
    """Run the whole toy pipeline on `sessions`' database; returns the numbers the demo prints."""
    import torch

    from preflab.training.runs import quiet_libraries

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the models are tiny: more threads only add synchronisation
    try:
        with quiet_libraries(reporter.enabled):
            return _run_toy(sessions, workdir, settings, reporter)
    finally:
        torch.set_num_threads(threads)


class _Clock:
    """Seconds per stage of a demo."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(now - self._last, 2)
        self._last = now


def _dataset(sessions: sessionmaker[Session], rankings: Path, out: Path, settings: ToySettings, **export) -> tuple:
    """Import the annotator's rankings, build the pairs and export them: (import summary, pairs, dataset)."""
    from preflab.db.export.dataset import ExportSettings
    from preflab.db.export.job import export_dataset
    from preflab.db.ingest.jsonl import import_file, import_rankings_batch
    from preflab.db.pairs.build import build_pairs

    imported = import_file(sessions, rankings, import_rankings_batch)
    with sessions.begin() as session:
        pairs = build_pairs(session)
    with sessions.begin() as session:
        version = export_dataset(
            session, out, ExportSettings(test_size=settings.test_size, seed=settings.seed, **export)
        )
        return (
            imported,
            pairs,
            {
                "name": version.name,
                "train": version.n_train,
                "test": version.n_test,
                "conversational": version.settings["conversational"],
            },
        )


def _run_toy(sessions: sessionmaker[Session], workdir: Path, settings: ToySettings, reporter: Reporter) -> dict:
    from datasets import load_from_disk
    from sqlalchemy import select
    from transformers import AutoModelForCausalLM

    from preflab.db.models import Prompt
    from preflab.training.demos import toy_world as toy
    from preflab.training.dpo import evaluate_policy_on_pairs
    from preflab.training.methods import train

    workdir.mkdir(parents=True, exist_ok=True)
    for part in ("base", "dataset"):  # a previous demo's (the run folders are cleared by the runs)
        shutil.rmtree(workdir / part, ignore_errors=True)
    if settings.world == "history":
        return _run_history(sessions, workdir, settings, reporter)
    clock = _Clock()
    base = toy.train_base_model(workdir / "base", steps=settings.base_steps, seed=settings.seed).resolve()
    n_rankings = toy_rankings(base, settings, workdir / "rankings.jsonl")
    clock.lap("base_model")
    reporter.note(f"trained the base model; the annotator ranked {n_rankings:,} prompts' candidates")
    # Plain text: the digit language is a base model's, with no chat template (training would give it plain text).
    imported, pairs, dataset = _dataset(
        sessions, workdir / "rankings.jsonl", workdir / "dataset", settings, conversational=False
    )
    clock.lap("rankings_pairs_export")
    reward = train(
        "reward",
        sessions,
        settings.reward_config(),
        str(base),
        dataset["name"],
        output_dir=str(workdir / "reward"),
        reporter=reporter,
    )
    clock.lap("reward_model")
    if settings.method == "rl":
        policy = train(
            "rl",
            sessions,
            settings.rl_config(reward.model_version),
            str(base),
            dataset["name"],
            output_dir=str(workdir / "rl"),
            reporter=reporter,
        )
        # The same held-out number as DPO reports: does the policy raise β·log(π/π_ref) of the chosen answer?
        test_pairs = load_from_disk(str(Path(policy.path).parent / "data"))["test"]
        implicit = evaluate_policy_on_pairs(policy.path, str(base), test_pairs, settings.dpo_config().beta)[
            "heldout_reward_accuracy"
        ]
    else:
        policy = train(
            "dpo",
            sessions,
            settings.dpo_config(),
            str(base),
            dataset["name"],
            output_dir=str(workdir / "dpo"),
            reporter=reporter,
        )
        implicit = policy.metrics["heldout_reward_accuracy"]
    clock.lap(settings.method)
    with sessions.begin() as session:
        test_prompts = [
            toy.parse_digits(text)
            for text in session.scalars(select(Prompt.text).where(Prompt.split == "test").order_by(Prompt.id))
        ]
    base_model = AutoModelForCausalLM.from_pretrained(base)
    after = toy.policy_report(
        AutoModelForCausalLM.from_pretrained(policy.path), base_model, test_prompts, seed=settings.seed
    )
    before = toy.policy_report(base_model, base_model, test_prompts, seed=settings.seed)
    clock.lap("evaluation")
    return {
        "world": "digits",
        "rm_accuracy": reward.metrics["heldout_accuracy"],
        "p_preferred_before": after["p_preferred_base"],
        "p_preferred_after": after["p_preferred_policy"],
        "kl_to_base": after["kl_to_base"],
        "base_rule_rate_after": after["base_rule_rate"],
        "base_rule_rate_before": before["base_rule_rate"],
        "stop_rate_after": after["stop_rate"],
        "stop_rate_before": before["stop_rate"],
        "dpo_heldout_reward_accuracy": implicit,
        "rankings": n_rankings,
        "imported": imported.imported,
        "pairs": pairs.pairs,
        "dataset": dataset,
        "held_out_prompts": len(test_prompts),
        "reward_model_version": reward.model_version,
        "policy_model_version": policy.model_version,
        "method": settings.method,
        "policy_metrics": {k: v for k, v in policy.metrics.items() if k != "history"},
        "workdir": str(workdir),
        "seconds": clock.seconds,
    }


def _run_history(sessions: sessionmaker[Session], workdir: Path, settings: ToySettings, reporter: Reporter) -> dict:
    """The world where the history matters: DPO on its conversational export, then the follow rates."""
    from sqlalchemy import select
    from transformers import AutoModelForCausalLM

    from preflab.db.models import Prompt
    from preflab.training.demos import history_world as world
    from preflab.training.methods import train

    clock = _Clock()
    base = world.train_base_model(workdir / "base", steps=settings.base_steps, seed=settings.seed).resolve()
    n_rankings = world.write_rankings(
        base, settings.prompts, settings.candidates, settings.seed, workdir / "rankings.jsonl", ANNOTATOR
    )
    clock.lap("base_model")
    reporter.note(f"trained the base model; the annotator ranked {n_rankings:,} conversations' replies")
    imported, pairs, dataset = _dataset(sessions, workdir / "rankings.jsonl", workdir / "dataset", settings)
    clock.lap("rankings_pairs_export")
    policy = train(
        "dpo",
        sessions,
        settings.history_dpo_config(),
        str(base),
        dataset["name"],
        output_dir=str(workdir / "dpo"),
        reporter=reporter,
    )
    clock.lap("dpo")
    with sessions.begin() as session:
        held_out = [
            world.parse(messages)
            for messages in session.scalars(select(Prompt.messages).where(Prompt.split == "test").order_by(Prompt.id))
        ]
    base_model = AutoModelForCausalLM.from_pretrained(base)
    after = world.follow_report(
        AutoModelForCausalLM.from_pretrained(policy.path), base_model, held_out, seed=settings.seed
    )
    before = world.follow_report(base_model, base_model, held_out, seed=settings.seed)
    clock.lap("evaluation")
    return {
        "world": "history",
        "follow_rate_before": after["follow_rate_base"],
        "follow_rate_after": after["follow_rate_policy"],
        "sampled_follow_rate_before": before["sampled_follow_rate"],
        "sampled_follow_rate_after": after["sampled_follow_rate"],
        "base_rule_rate_before": before["base_rule_rate"],
        "base_rule_rate_after": after["base_rule_rate"],
        "dpo_heldout_reward_accuracy": policy.metrics["heldout_reward_accuracy"],
        "rankings": n_rankings,
        "imported": imported.imported,
        "pairs": pairs.pairs,
        "dataset": dataset,
        "held_out_conversations": len(held_out),
        "policy_model_version": policy.model_version,
        "method": "dpo",
        "policy_metrics": {k: v for k, v in policy.metrics.items() if k != "history"},
        "workdir": str(workdir),
        "seconds": clock.seconds,
    }


def toy_demo(
    settings: ToySettings,
    workdir: str | Path | None = None,
    database_url: str | None = None,
    reporter: Reporter = SILENT,
) -> dict:
    """The `demo toy` job: the toy pipeline in `workdir` (default DATA_DIR/demo-toy).

    Args:
        database_url: the database to record everything in; default a fresh SQLite
            file in the work folder, so the toy never mixes with real data.

    Returns:
        `run_toy`'s numbers, with the settings used.
    """
    from preflab.db.engine import open_sessions

    workdir = Path(workdir) if workdir else data_dir() / "demo-toy"
    if database_url is None:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "toy.db").unlink(missing_ok=True)
        database_url = f"sqlite:///{(workdir / 'toy.db').resolve()}"
    result = run_toy(open_sessions(database_url), workdir, settings, reporter)
    return result | {"settings": asdict(settings)}
