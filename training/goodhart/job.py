"""`run_goodhart`: best-of-n, DPO, SimPO and RL against one imperfect proxy, scored by the known truth.

1. Train the base model of the digit language and fix held-out evaluation prompts.
2. Let the counting world's annotator rank base samples for a limited number of
   prompts; import, pair and export them, and fit the proxy reward model (all
   through preflab's own jobs and database).
3. Optimise the base policy against that preference: best-of-n on the proxy
   (closed form), DPO (a β sweep), SimPO, and RL on the proxy (a β sweep).
4. Score every policy exactly in the world: KL to the base, proxy and true reward,
   win rate; fit Gao et al.'s curve per method; draw the chart.
5. Rank more prompts, refit the proxy and redo best-of-n, to see how the number
   of comparisons moves the point where the true reward turns down.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.errors import ConfigError
from preflab.training.goodhart import world
from preflab.training.goodhart.frontier import Point, bon_points, findings, fit_methods, policy_point

POLICIES = ("dpo", "simpo", "rl")  # the methods swept over β against the proxy, in this order
# Each method's settings here, beside `GoodhartSettings.common`; a policy's β comes from its sweep.
TRAINING: dict[str, dict[str, Any]] = {
    "reward": {
        "grouped": True,
        "learning_rate": 2e-3,
        "num_train_epochs": 5,
        "per_device_train_batch_size": 16,
        "warmup_steps": 0.1,
    },
    # Plain DPO: the world scores the four digits only, so the toy's EOS-keeping NLL term is not needed.
    "dpo": {
        "loss_type": "sigmoid",
        "learning_rate": 5e-4,
        "num_train_epochs": 2,
        "per_device_train_batch_size": 32,
        "warmup_steps": 0.1,
    },
    "simpo": {"learning_rate": 5e-4, "num_train_epochs": 1, "per_device_train_batch_size": 32, "warmup_steps": 0.1},
    "rl": {"learning_rate": 5e-4, "per_device_train_batch_size": 32, "n": 4, "max_new_tokens": 5, "eval_prompts": 0},
}


def numbers(text: str, option: str, kind=float) -> list:
    """Comma-separated numbers of an option ('' is none)."""
    try:
        return [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"{option} must be comma-separated numbers, not {text!r}") from None


@dataclass
class GoodhartSettings:
    """The experiment's knobs; the defaults are the run the README reports."""

    prompts: int = field(
        default=150,
        metadata={
            "help": "Prompts whose base samples the annotator ranks for the proxy reward model (about 5 "
            "comparisons each): the limited data that makes the proxy imperfect."
        },
    )
    more_prompts: str = field(
        default="600",
        metadata={
            "help": "Larger rankings (prompt counts, comma-separated) for further proxies, re-run with best-of-n: "
            "how more comparisons move the peak ('' skips)."
        },
    )
    candidates: int = field(default=4, metadata={"help": "Base samples ranked per prompt."})
    temperature: float = field(
        default=0.5,
        metadata={
            "help": "The annotator's noise τ: P(a ≻ b) = σ((R*(a) − R*(b))/τ); 0 ranks by the true reward alone."
        },
    )
    eval_prompts: int = field(default=48, metadata={"help": "Held-out prompts every policy is scored on, exactly."})
    base_steps: int = field(default=400, metadata={"help": "Training steps of the base model on the digit language."})
    ns: str = field(default="1,2,4,8,16,32,64,128,256", metadata={"help": "Best-of-n's n values, comma-separated."})
    dpo_betas: str = field(default="0.03,0.1,0.3", metadata={"help": "DPO's β sweep, comma-separated ('' skips)."})
    simpo_betas: str = field(default="2", metadata={"help": "SimPO's β values, comma-separated ('' skips)."})
    rl_betas: str = field(
        default="0.01,0.05,0.2", metadata={"help": "RL's KL coefficients β, comma-separated ('' skips)."}
    )
    rl_steps: int = field(default=80, metadata={"help": "Optimizer steps of each RL run (32 completions each)."})
    seed: int = field(default=0, metadata={"help": "Seed of every random choice."})

    def __post_init__(self) -> None:
        for name in ("prompts", "candidates", "eval_prompts", "base_steps", "rl_steps"):
            if getattr(self, name) < (2 if name == "candidates" else 1):
                raise ConfigError(f"--{name.replace('_', '-')} is too small: {getattr(self, name)}")
        if self.temperature < 0:
            raise ConfigError("--temperature cannot be negative")
        if not self.n_values or min(self.n_values) < 1:
            raise ConfigError("--ns needs whole numbers ≥ 1")
        for name in ("dpo_betas", "simpo_betas"):
            if any(b <= 0 for b in numbers(getattr(self, name), "--" + name.replace("_", "-"))):
                raise ConfigError(f"--{name.replace('_', '-')} must be positive")
        if any(b < 0 for b in numbers(self.rl_betas, "--rl-betas")):
            raise ConfigError("--rl-betas cannot be negative")
        numbers(self.more_prompts, "--more-prompts", int)

    @property
    def n_values(self) -> list[int]:
        return numbers(self.ns, "--ns", int)

    def sweep(self, method: str) -> list[float]:
        return numbers(getattr(self, f"{method}_betas"), f"--{method}-betas")

    @property
    def more(self) -> list[int]:
        return sorted(c for c in numbers(self.more_prompts, "--more-prompts", int) if c > self.prompts)

    def common(self) -> dict[str, Any]:
        return {"logging_steps": 5, "save_steps": 10_000, "seed": self.seed, "max_length": 16, "use_cpu": True}

    def config(self, method: str, **values):
        """The config of a run of `method` (a name in `preflab.training.methods.METHODS`) in this world."""
        from preflab.training.methods import METHODS

        if method == "rl":
            values = {"max_steps": self.rl_steps, **values}
        return METHODS[method].config(**TRAINING[method], **values, **self.common())


@dataclass
class Stage:
    """One proxy: the rankings it was fitted to, and the reward model."""

    prompts: int
    rankings: int
    pairs: int
    dataset_version: str
    reward_model_version: str
    reward_model_path: str
    heldout_accuracy: float | None


def rank_and_fit(
    sessions: sessionmaker[Session],
    base_model,
    base_path: Path,
    prompts: list[list[int]],
    ranked: int,
    settings: GoodhartSettings,
    workdir: Path,
    reporter: Reporter,
) -> Stage:
    """Rank base samples for `prompts` (after the `ranked` already in the store) and fit a proxy on all of them."""
    from preflab.db.export.dataset import ExportSettings
    from preflab.db.export.job import export_dataset
    from preflab.db.ingest.jsonl import import_file, import_rankings_batch
    from preflab.db.pairs.build import build_pairs
    from preflab.training.methods import train

    path = workdir / f"rankings-{len(prompts)}.jsonl"
    lines = world.write_rankings(
        base_model, prompts[ranked:], settings.candidates, settings.temperature, settings.seed + len(prompts), path
    )
    import_file(sessions, path, import_rankings_batch)
    with sessions.begin() as session:
        pairs = build_pairs(session).pairs
    with sessions.begin() as session:
        version = export_dataset(
            session, workdir / f"dataset-{len(prompts)}", ExportSettings(test_size=0.1, seed=settings.seed)
        )
        name = version.name
    proxy = train(
        "reward",
        sessions,
        settings.config("reward"),
        str(base_path),
        name,
        output_dir=str(workdir / f"proxy-{len(prompts)}"),
        reporter=reporter,
    )
    accuracy = proxy.metrics.get("heldout_accuracy")
    reporter.note(
        f"proxy {proxy.model_version}: {pairs:,} comparisons from {len(prompts)} prompts, "
        f"held-out accuracy {accuracy if accuracy is None else round(accuracy, 3)}"
    )
    return Stage(len(prompts), lines, pairs, name, proxy.model_version, proxy.path, accuracy)


def run_goodhart(
    sessions: sessionmaker[Session], workdir: Path, settings: GoodhartSettings, reporter: Reporter = SILENT
) -> dict[str, Any]:
    """Run the whole experiment on `sessions`' database; returns the table, the fits, the findings, the chart."""
    import torch

    from preflab.training.runs import quiet_libraries

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the models are tiny: more threads only add synchronisation
    try:
        with quiet_libraries(reporter.enabled):
            return _run(sessions, Path(workdir), settings, reporter)
    finally:
        torch.set_num_threads(threads)


def _run(
    sessions: sessionmaker[Session], workdir: Path, settings: GoodhartSettings, reporter: Reporter
) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    from preflab.training.demos.toy_world import train_base_model
    from preflab.training.goodhart.chart import frontier_chart
    from preflab.training.methods import train

    workdir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(workdir / "base", ignore_errors=True)
    clock, seconds = time.perf_counter(), {}

    def lap(name: str) -> None:
        nonlocal clock
        seconds[name] = round(time.perf_counter() - clock, 2)
        clock = time.perf_counter()

    base_path = train_base_model(workdir / "base", steps=settings.base_steps, seed=settings.seed).resolve()
    base = AutoModelForCausalLM.from_pretrained(base_path).eval()
    eval_prompts = world.sample_prompts(settings.eval_prompts, settings.seed + 10_000)
    largest = max((settings.prompts, *settings.more))
    train_prompts = world.sample_prompts(largest, settings.seed, exclude={tuple(p) for p in eval_prompts})
    ref_logp = world.log_probs(base, eval_prompts)
    true = world.true_rewards_table(eval_prompts)
    lap("base_model")

    stage = rank_and_fit(sessions, base, base_path, train_prompts[: settings.prompts], 0, settings, workdir, reporter)
    proxy = world.ProxyScores(_scorer(AutoModelForSequenceClassification, stage.reward_model_path), eval_prompts)
    reference = policy_point("reference", "", ref_logp, ref_logp, true, proxy)
    points: list[Point] = bon_points(ref_logp, true, proxy, settings.n_values)
    lap("proxy_and_best_of_n")

    def score(method: str, setting: str, result) -> None:
        model = AutoModelForCausalLM.from_pretrained(result.path).eval()
        point = policy_point(
            method,
            setting,
            world.log_probs(model, eval_prompts),
            ref_logp,
            true,
            proxy,
            model_version=result.model_version,
        )
        points.append(point)
        reporter.note(f"{method} {setting}: KL {point.kl:.3f}, proxy {point.proxy:.3f}, true {point.true:.3f}")

    against = {"rl": {"reward_model": stage.reward_model_version}}  # RL optimises the proxy itself
    for method in POLICIES:
        for beta in settings.sweep(method):
            config = settings.config(method, beta=beta, **against.get(method, {}))
            score(
                method,
                f"beta={beta:g}",
                train(method, sessions, config, str(base_path), stage.dataset_version, reporter=reporter),
            )
        lap(method)

    # More comparisons: a better proxy, best-of-n only (the other methods would need retraining).
    sweep = [_sweep_row(stage, points)]
    ranked = settings.prompts
    for count in settings.more:
        more = rank_and_fit(sessions, base, base_path, train_prompts[:count], ranked, settings, workdir, reporter)
        ranked = count
        scorer = world.ProxyScores(_scorer(AutoModelForSequenceClassification, more.reward_model_path), eval_prompts)
        sweep.append(_sweep_row(more, bon_points(ref_logp, true, scorer, settings.n_values)))
    lap("comparisons_sweep")

    fits = fit_methods(points, reference.true)
    chart = frontier_chart(
        points,
        fits,
        reference.true,
        workdir / "goodhart.png",
        title=f"Counting world, proxy from {stage.pairs:,} comparisons",
    )
    lap("chart")
    return {
        "reference": reference.as_dict(),
        "points": [p.as_dict() for p in points],
        "fits": {m: (f.as_json() if f else None) for m, f in fits.items()},
        "findings": findings(points, reference.true),
        "comparisons_sweep": sweep,
        "proxy": asdict(stage),
        "eval_prompts": len(eval_prompts),
        "chart": str(chart),
        "workdir": str(workdir),
        "seconds": seconds,
    }


def _scorer(auto_class, path: str):
    return auto_class.from_pretrained(path).eval()


def _sweep_row(stage: Stage, points: list[Point]) -> dict[str, Any]:
    """Best-of-n on one proxy: where its true reward peaks, and how far the proxy overshoots there."""
    bon = [p for p in points if p.method == "best-of-n"]
    peak = max(bon, key=lambda p: p.true)
    return {
        "prompts": stage.prompts,
        "comparisons": stage.pairs,
        "reward_model_version": stage.reward_model_version,
        "heldout_accuracy": stage.heldout_accuracy,
        "peak_setting": peak.setting,
        "peak_kl": peak.kl,
        "peak_true": peak.true,
        "true_at_largest_n": bon[-1].true,
        "proxy_at_largest_n": bon[-1].proxy,
    }


def goodhart_demo(
    settings: GoodhartSettings,
    workdir: str | Path | None = None,
    database_url: str | None = None,
    reporter: Reporter = SILENT,
) -> dict[str, Any]:
    """The `demo goodhart` job: `run_goodhart` in `workdir` (default DATA_DIR/demo-goodhart).

    Args:
        database_url: where to record the runs; default a fresh SQLite file in the work
            folder, so the experiment never mixes with real data.
    """
    from preflab.db.engine import open_sessions
    from preflab.settings import data_dir

    workdir = Path(workdir) if workdir else data_dir() / "demo-goodhart"
    if database_url is None:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "goodhart.db").unlink(missing_ok=True)
        database_url = f"sqlite:///{(workdir / 'goodhart.db').resolve()}"
    return run_goodhart(open_sessions(database_url), workdir, settings, reporter) | {"settings": asdict(settings)}
