"""The jobs behind `preflab bon …`: read samples, estimate every n, draw the plot, sample with a reward model.

Each is one function a command (or a notebook, or another job) calls; the
commands in `preflab.commands.bon` only parse options and print.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.db.models import OVERALL
from preflab.errors import ConfigError, InputError
from preflab.lm.engines.config import EngineConfig
from preflab.training.bestofn.config import BonSampleConfig
from preflab.training.bestofn.estimator import BonEstimate, estimate
from preflab.training.bestofn.fit import GaoFit
from preflab.training.bestofn.sources import Group


def parse_ns(text: str, largest: int | None = None) -> list[int]:
    """'1,2,4,8', 'pow2' (1, 2, 4, … ≤ largest) or 'all' (1 … largest)."""
    text = text.strip().lower()
    if text in ("all", "pow2"):
        if largest is None:
            raise InputError(f"--n {text} needs samples to size it; give numbers instead")
        if text == "all":
            return list(range(1, largest + 1))
        return [1 << i for i in range(largest.bit_length()) if 1 << i <= largest]
    try:
        ns = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"--n must be comma-separated whole numbers, 'pow2' or 'all', not {text!r}") from None
    if not ns or min(ns) < 1:
        raise InputError("--n needs whole numbers ≥ 1")
    return ns


def db_samples(
    session: Session, proxy: str, true: str | None = None, criterion: str = OVERALL
) -> tuple[list[Group], str]:
    """The groups of an AI annotator's scores (and another annotator's, or people's) of `criterion`, described."""
    from preflab.training.bestofn.sources import db_groups

    groups, summary = db_groups(session, proxy, true, criterion)
    truth = f", true: {true} ({summary.true_values})" if true else ""
    return groups, f"proxy: {proxy} ({summary.proxy_values}){truth}"


def estimate_groups(groups: list[Group], ns: str) -> BonEstimate:
    """Best-of-n estimates for the n values in `ns` ('1,2,4', 'pow2', 'all'), sized by the largest group."""
    largest = max(p.size for _, p, _ in groups)
    return estimate([(p, t) for _, p, t in groups], parse_ns(ns, largest))


@dataclass
class GoodhartPlot:
    path: Path
    estimate: BonEstimate
    fit: GaoFit | None  # None without true rewards, or with fewer than two n > 1


def plot_groups(groups: list[Group], ns: str, out: str | Path, title: str) -> GoodhartPlot:
    """Estimate every n, fit Gao et al.'s R(d) where the true reward is known, and draw the picture."""
    from preflab.training.bestofn.fit import fit_gao
    from preflab.training.bestofn.plot import goodhart_plot

    result = estimate_groups(groups, ns)
    fit = None
    if result.true[0] is not None and len([n for n in result.n if n > 1]) >= 2:
        fit = fit_gao(result.kl_bound, result.true)
    return GoodhartPlot(goodhart_plot(result, out, fit, title=title), result, fit)


def sample_best_of_n(
    sessions: sessionmaker[Session],
    reward_model: str,
    policy: str,
    config: BonSampleConfig,
    prompts_file: str | Path | None = None,
    reporter: Reporter = SILENT,
    *,
    engine: EngineConfig | None = None,
) -> dict[str, Any]:
    """Best-of-n sampling with a trained reward model, and what it did to the policy.

    Samples and stores N responses per prompt (`preflab.training.bestofn.sample.best_of_n`),
    then adds the KL bound log N − (N−1)/N, Beirami et al.'s KL estimate from the
    kept responses' sampling probabilities, and the proxy reward estimated for
    every power of two n ≤ N from everything this reward model has scored.

    Args:
        reward_model: a model version of kind `reward`.
        policy: the causal LM to sample from (model version, embedded name, path or hub id; on a
            server, the served model's name: the draws are stored as `openai:<served model>`).
        prompts_file: JSON Lines prompts to import and sample for; default every stored prompt.
        engine: where the policy samples (default: in this process); the reward model scores here.

    Returns:
        The summary (`BonSampleSummary.as_dict()`) with `kl_bound`, `kl_beirami` and `estimate`.
    """
    from preflab.labelling.selection import prompts_from_file
    from preflab.lm.engines import open_engine
    from preflab.lm.names import ModelCache, load_named_model
    from preflab.training.bestofn.kl import beirami_kl_log, kl_bound
    from preflab.training.bestofn.sample import best_of_n, reward_model_version

    cache = ModelCache()
    # A call's draws go through one `generate` in process: N of a prompt, however small --batch-size.
    batch = max(config.batch_size, config.n)
    with open_engine(engine, sessions, model=policy, cache=cache, batch_size=batch) as drawing:
        if config.top_k and not drawing.samples_top_k:
            raise ConfigError(
                "--top-k cannot be sent to a server (the OpenAI API has none): leave it at 0 with --engine openai"
            )
        with sessions.begin() as session:
            reward_model_version(session, reward_model)  # a reward model with weights, or a one-line error
        prompt_ids = prompts_from_file(sessions, prompts_file) if prompts_file else None
        reward = load_named_model(sessions, reward_model, record=False, scorer=True, heads=True, cache=cache)
        reporter.note(f"best-of-{config.n} with {drawing.name}, scored by {reward.label}")
        summary = best_of_n(sessions, drawing, reward, config, prompt_ids, reporter)
    cache.clear()
    report = summary.as_dict()
    report["kl_bound"] = float(kl_bound(config.n))
    # Beirami et al.: ε is the sampling probability of each kept response (a server does not give it).
    logprobs = [s.logprob for s in summary.selected]
    report["kl_beirami"] = (
        float(np.mean(beirami_kl_log(logprobs, config.n))) if logprobs and None not in logprobs else None
    )
    report["estimate"] = None
    if summary.selected or summary.kept:  # else nothing is scored yet: every draw went unanswered
        with sessions.begin() as session:
            groups, _ = db_samples(session, reward_model, criterion=config.head or OVERALL)
        est = estimate_groups([(name, proxy, None) for name, proxy, _ in groups], "pow2")
        report["estimate"] = {
            "n": est.n,
            "proxy": est.proxy,
            "groups": est.groups,
            "kl_bound": est.kl_bound,
            "largest_group": max(p.size for _, p, _ in groups),
        }
    return report
