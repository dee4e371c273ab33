"""`preflab demo toy`: the digit world end to end, through preflab's own pipeline.

1. train a tiny causal LM on the base language (`preflab.training.demos.toy_world`);
2. sample candidates from it for a few hundred prompts;
3. a simulated annotator ranks them by its hidden preference (the first output
   digit is the last input digit + 1) and the rankings are imported as JSON Lines;
4. pairs are built, a dataset version exported (split by prompt);
5. a reward model (`train reward`) and a DPO policy (`train dpo`) are trained on it;
6. the policy is compared with the base model on the held-out prompts.

The answer is known: the reward model should rank held-out pairs almost
perfectly, and DPO should move the preferred first digit from ≈ 1/4 to ≥ 0.9
while the later digits keep following the base rule.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import click

from preflab.console import echo_json, pass_settings
from preflab.settings import Settings, data_dir

ANNOTATOR = "simulated-annotator"


@dataclass
class ToySettings:
    prompts: int = 1000         # train and test together
    candidates: int = 6         # sampled per prompt (the distinct ones are ranked)
    test_size: float = 0.2
    base_steps: int = 400       # SFT steps of the base model
    seed: int = 0

    def reward_config(self):
        from preflab.training.config import RewardTrainConfig

        # Grouped: each prompt's candidates scored once (the demo's reward model is InstructGPT-style).
        return RewardTrainConfig(grouped=True, learning_rate=2e-3, num_train_epochs=5, per_device_train_batch_size=16,
                                 warmup_steps=0.1, **self._common())

    def dpo_config(self):
        from preflab.training.config import DPOTrainConfig

        # DPO alone lowers the EOS probability after rejected outputs and, by generalisation, after
        # all of them (the toy's sentences stop ending); the chosen responses' NLL (RPO) keeps it.
        return DPOTrainConfig(loss_type="sigmoid,sft", beta=0.1, learning_rate=5e-4, num_train_epochs=1,
                              per_device_train_batch_size=32, precompute_ref_batch_size=256, warmup_steps=0.1,
                              **self._common())

    def _common(self) -> dict:
        return dict(logging_steps=5, save_steps=10_000, seed=self.seed, max_length=16, use_cpu=True)


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
            record = {"prompt": toy.prompt_text(prompt), "responses": [toy.completion_text(o) for o in distinct],
                      "ranking": toy.annotator_tiers(prompt, distinct), "annotator": ANNOTATOR,
                      "annotator_kind": "human", "id": f"toy-{settings.seed}-{i}", "model": str(base_path)}
            handle.write(json.dumps(record) + "\n")
            lines += 1
    return lines


def run_toy(sessions, workdir: Path, settings: ToySettings, progress: bool = True) -> dict:
    """Run the whole toy pipeline on `sessions`' database; returns the numbers the demo prints."""
    import torch

    from preflab.training.runs import quiet_libraries

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the models are tiny: more threads only add synchronisation
    try:
        with quiet_libraries(progress):
            return _run_toy(sessions, workdir, settings, progress)
    finally:
        torch.set_num_threads(threads)


def _run_toy(sessions, workdir: Path, settings: ToySettings, progress: bool) -> dict:
    from sqlalchemy import select
    from transformers import AutoModelForCausalLM

    from preflab.db.export import ExportSettings, export_dataset
    from preflab.db.ingest import import_file, import_rankings_batch
    from preflab.db.models import Prompt
    from preflab.db.pairs import build_pairs
    from preflab.training.demos import toy_world as toy
    from preflab.training.dpo import train_dpo
    from preflab.training.reward import train_reward

    workdir.mkdir(parents=True, exist_ok=True)
    for part in ("base", "dataset"):  # a previous demo's (the run folders are cleared by the runs)
        shutil.rmtree(workdir / part, ignore_errors=True)
    clock, seconds = time.perf_counter(), {}

    def lap(name: str) -> None:
        nonlocal clock
        seconds[name] = round(time.perf_counter() - clock, 2)
        clock = time.perf_counter()

    base = toy.train_base_model(workdir / "base", steps=settings.base_steps, seed=settings.seed).resolve()
    n_rankings = toy_rankings(base, settings, workdir / "rankings.jsonl")
    lap("base_model")
    imported = import_file(sessions, workdir / "rankings.jsonl", import_rankings_batch)
    with sessions.begin() as session:
        pairs = build_pairs(session)
    with sessions.begin() as session:
        version = export_dataset(session, workdir / "dataset",
                                 ExportSettings(test_size=settings.test_size, seed=settings.seed))
        dataset = {"name": version.name, "train": version.n_train, "test": version.n_test}
    lap("rankings_pairs_export")
    reward = train_reward(sessions, settings.reward_config(), str(base), dataset["name"],
                          output_dir=str(workdir / "reward"), progress=progress)
    lap("reward_model")
    dpo = train_dpo(sessions, settings.dpo_config(), str(base), dataset["name"],
                    output_dir=str(workdir / "dpo"), progress=progress)
    lap("dpo")
    with sessions.begin() as session:
        test_prompts = [toy.parse_digits(text) for text in session.scalars(
            select(Prompt.text).where(Prompt.split == "test").order_by(Prompt.id))]
    base_model = AutoModelForCausalLM.from_pretrained(base)
    after = toy.policy_report(AutoModelForCausalLM.from_pretrained(dpo.path), base_model, test_prompts,
                              seed=settings.seed)
    before = toy.policy_report(base_model, base_model, test_prompts, seed=settings.seed)
    lap("evaluation")
    return {
        "rm_accuracy": reward.metrics["heldout_accuracy"],
        "p_preferred_before": after["p_preferred_base"],
        "p_preferred_after": after["p_preferred_policy"],
        "kl_to_base": after["kl_to_base"],
        "base_rule_rate_after": after["base_rule_rate"],
        "base_rule_rate_before": before["base_rule_rate"],
        "stop_rate_after": after["stop_rate"],
        "stop_rate_before": before["stop_rate"],
        "dpo_heldout_reward_accuracy": dpo.metrics["heldout_reward_accuracy"],
        "rankings": n_rankings, "imported": imported.imported, "pairs": pairs.pairs, "dataset": dataset,
        "held_out_prompts": len(test_prompts), "reward_model_version": reward.model_version,
        "policy_model_version": dpo.model_version, "workdir": str(workdir), "seconds": seconds,
    }


@click.command("toy")
@click.option("--workdir", type=click.Path(file_okay=False),
              help="Folder for the models, rankings and dataset (default: DATA_DIR/demo-toy).")
@click.option("--prompts", type=click.IntRange(20, 100_000), default=ToySettings.prompts, show_default=True,
              help="Prompts (train and test) the annotator ranks candidates for.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of every random choice.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@pass_settings
def toy_command(settings: Settings, workdir, prompts, seed, as_json):
    """The digit world of the minimal-RLHF notebook: reward model and DPO with a known answer.

    Uses the database given with --database-url (or PREFLAB_DATABASE_URL), else a
    fresh SQLite file in the work folder, so the toy never mixes with real data.

    Example: preflab demo toy --json
    """
    from preflab.db.engine import open_database, session_factory

    workdir = Path(workdir) if workdir else data_dir() / "demo-toy"
    explicit = click.get_current_context().find_root().params.get("database_url")
    url = settings.database_url if explicit else f"sqlite:///{(workdir / 'toy.db').resolve()}"
    if not explicit:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "toy.db").unlink(missing_ok=True)
    result = run_toy(session_factory(open_database(url)), workdir, ToySettings(prompts=prompts, seed=seed),
                     progress=not as_json)
    result["settings"] = asdict(ToySettings(prompts=prompts, seed=seed))
    if as_json:
        echo_json(result)
        return
    click.echo(f"{result['rankings']:,} rankings → {result['pairs']:,} pairs → {result['dataset']['name']} "
               f"({result['dataset']['train']:,} train / {result['dataset']['test']:,} test pairs)")
    click.echo(f"reward model {result['reward_model_version']}: held-out pairwise accuracy {result['rm_accuracy']:.3f}")
    click.echo(f"policy {result['policy_model_version']}: P(preferred first digit) "
               f"{result['p_preferred_before']:.3f} → {result['p_preferred_after']:.3f} on "
               f"{result['held_out_prompts']} held-out prompts; KL to base {result['kl_to_base']:.3f} nats; "
               f"base rule kept in {result['base_rule_rate_after']:.1%} of samples "
               f"(base model {result['base_rule_rate_before']:.1%}); P(EOS after 4 digits) "
               f"{result['stop_rate_before']:.3f} → {result['stop_rate_after']:.3f}")
