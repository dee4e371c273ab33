"""`preflab bon …`: best-of-n estimates, exact KL and win rate, the Goodhart plot, sampling."""

from __future__ import annotations

import click

from preflab.console import echo_json, pass_settings
from preflab.errors import InputError
from preflab.settings import Settings


@click.group("bon")
def bon_group():
    """Best-of-n analysis: how far the policy moved (KL) and whether the true reward followed.

    Example: preflab bon estimate samples.jsonl --n 1,2,4,8
    """


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


def parse_floats(text: str, option: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"{option} must be comma-separated numbers, not {text!r}") from None


def load_groups(settings: Settings, path, from_db: bool, proxy, true):
    """The samples from FILE or from the database; returns (groups, one-line description)."""
    if from_db:
        if path:
            raise InputError("give FILE or --from-db, not both")
        if not proxy:
            raise InputError("--from-db needs --proxy NAME (the judge or reward model that was optimised)")
        from preflab.db.engine import open_sessions
        from preflab.training.bestofn.sources import db_groups

        with open_sessions(settings.database_url).begin() as session:
            groups, summary = db_groups(session, proxy, true)
        truth = f", true: {true} ({summary.true_values})" if true else ""
        return groups, f"proxy: {proxy} ({summary.proxy_values}){truth}"
    if proxy or true:
        raise InputError("--proxy and --true name annotators in the database: add --from-db")
    if not path:
        raise InputError("give a JSON Lines FILE or --from-db --proxy NAME")
    from preflab.training.bestofn.sources import read_jsonl

    return read_jsonl(path), str(path)


def source_options(command):
    """FILE | --from-db --proxy NAME [--true NAME|human], shared by estimate and plot."""
    for decorator in reversed([
        click.argument("path", metavar="[FILE]", required=False, type=click.Path(dir_okay=False)),
        click.option("--from-db", is_flag=True, help="Read scores and rankings from the database."),
        click.option("--proxy", metavar="NAME", help="With --from-db: the AI annotator (judge or reward model) optimised."),
        click.option("--true", "true_name", metavar="NAME|human",
                     help="With --from-db: another annotator's scores, or 'human' (mean Borda of human rankings)."),
    ]):
        command = decorator(command)
    return command


def _fmt(value, spec: str = ".4f") -> str:
    return "—" if value is None else format(value, spec)


@bon_group.command("estimate")
@source_options
@click.option("--n", "ns", default="pow2", show_default=True, help="Comma-separated n values, 'pow2' or 'all'.")
@click.option("--json", "as_json", is_flag=True, help="Print the estimates as JSON.")
@pass_settings
def estimate_command(settings: Settings, path, from_db, proxy, true_name, ns, as_json):
    """Estimate E[true] and E[proxy] under best-of-n for each n, from N ≥ n samples per group.

    FILE is JSON Lines, one sample a line: {"group": "prompt-17", "proxy": 0.83, "true": 1.0}
    (`true` optional). Each group's samples serve every n at once (the unbiased
    estimator over all n-subsets); the mean is over groups with ≥ n samples.

    Example: preflab bon estimate --from-db --proxy rm-v3 --true human --n 1,2,4,8
    """
    from preflab.training.bestofn.estimator import estimate

    groups, described = load_groups(settings, path, from_db, proxy, true_name)
    largest = max(p.size for _, p, _ in groups)
    result = estimate([(p, t) for _, p, t in groups], parse_ns(ns, largest))
    if as_json:
        echo_json(result.as_json())
        return
    click.echo(f"{'n':>6}  {'true':>9}  {'± stderr':>9}  {'proxy':>9}  {'groups':>6}  {'KL bound':>8}")
    for n, t, se, p, g, kl in zip(result.n, result.true, result.true_stderr, result.proxy, result.groups,
                                  result.kl_bound):
        click.echo(f"{n:>6}  {_fmt(t):>9}  {_fmt(se):>9}  {_fmt(p):>9}  {g:>6}  {kl:>8.3f}")
    samples = sum(p.size for _, p, _ in groups)
    click.echo(f"best-of-n over {len(groups):,} groups ({samples:,} samples; {described})")


@bon_group.command("kl")
@click.option("--probs", required=True, help="Reference probabilities of the outcomes, comma-separated (sum 1).")
@click.option("--rewards", required=True, help="The reward of each outcome, comma-separated.")
@click.option("--n", "ns", default="1,2,4,8,16", show_default=True, help="Comma-separated n values.")
@click.option("--json", "as_json", is_flag=True, help="Print the numbers as JSON.")
def kl_command(probs, rewards, ns, as_json):
    """Exact KL and win rate of best-of-n for a discrete reference, beside their bounds.

    Prints per n: the exact KL(best-of-n ‖ P), the log n − (n−1)/n bound, Beirami
    et al.'s estimate (its expectation under best-of-n), the exact win rate
    against one draw from P (ties ½) and the n/(n+1) bound.

    Example: preflab bon kl --probs 0.5,0.3,0.2 --rewards 3,2,1 --n 1,2,4
    """
    from preflab.training.bestofn.kl import theory

    result = theory(parse_floats(probs, "--probs"), parse_floats(rewards, "--rewards"), parse_ns(ns))
    if as_json:
        echo_json(result.as_json())
        return
    click.echo(f"{'n':>6}  {'KL exact':>9}  {'KL bound':>9}  {'Beirami':>9}  {'win rate':>9}  {'n/(n+1)':>9}")
    for row in zip(result.n, result.kl_exact, result.kl_bound, result.kl_beirami, result.win_rate,
                   result.win_rate_bound):
        n, *values = row
        click.echo(f"{n:>6}  " + "  ".join(f"{v:>9.4f}" for v in values))


@bon_group.command("plot")
@source_options
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The image to write (.png, .svg, .pdf).")
@click.option("--n", "ns", default="all", show_default=True, help="Comma-separated n values, 'pow2' or 'all'.")
@click.option("--json", "as_json", is_flag=True, help="Print the fit and the path as JSON.")
@pass_settings
def plot_command(settings: Settings, path, from_db, proxy, true_name, out, ns, as_json):
    """Draw the Goodhart picture: true and proxy reward against KL with the fitted R(d), and win rate.

    Reads samples like `bon estimate`; without FILE or --from-db it draws the
    best-of-n notebook's toy (see `preflab demo bon`).

    Example: preflab bon plot samples.jsonl --out goodhart.png
    """
    from preflab.training.bestofn.estimator import estimate
    from preflab.training.bestofn.fit import fit_gao
    from preflab.training.bestofn.plot import goodhart_plot

    if path or from_db or proxy or true_name:
        groups, described = load_groups(settings, path, from_db, proxy, true_name)
    else:
        import numpy as np

        from preflab.training.demos.bon import toy_samples

        true, prox = toy_samples(np.random.default_rng(0), 10_000)
        groups, described = [("toy", prox, true)], "the notebook toy"
    largest = max(p.size for _, p, _ in groups)
    result = estimate([(p, t) for _, p, t in groups], parse_ns(ns, largest))
    fit = None
    if result.true[0] is not None and len([n for n in result.n if n > 1]) >= 2:
        fit = fit_gao(result.kl_bound, result.true)
    written = goodhart_plot(result, out, fit, title=described if len(described) < 40 else "best-of-n")
    if as_json:
        echo_json({"out": str(written), "n_max": max(result.n), "fit": fit.as_json() if fit else None})
        return
    peak = ""
    if fit and fit.kl_peak is not None:
        peak = f"; fitted true reward peaks at KL {fit.kl_peak:.2f} nats (n ≈ e^{fit.kl_peak + 1:.1f})"
    click.echo(f"wrote {written} (n = 1 … {max(result.n)}, {described}){peak}")


@bon_group.command("sample")
@click.option("--reward-model", "reward_model", required=True, metavar="MODEL_VERSION",
              help="The reward model: a model version of kind 'reward'.")
@click.option("--policy", metavar="ID_OR_PATH",
              help="The causal LM to sample from (model version, path, hub id); default: the global --model.")
@click.option("--n", "n", type=int, default=8, show_default=True, help="Samples per prompt; the best is kept.")
@click.option("--prompts", "prompts_file", type=click.Path(dir_okay=False),
              help="JSON Lines prompts to import and sample for (default: every stored prompt).")
@click.option("--temperature", type=float, default=1.0, show_default=True, help="Sampling temperature.")
@click.option("--top-p", type=float, default=1.0, show_default=True, help="Nucleus sampling mass (1 = off).")
@click.option("--top-k", type=int, default=0, show_default=True, help="Sample from the k likeliest tokens (0 = off).")
@click.option("--max-new-tokens", type=int, default=128, show_default=True, help="Longest response in tokens.")
@click.option("--batch-size", type=int, default=8, show_default=True, help="Sequences per forward pass.")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed.")
@click.option("--conversational", is_flag=True,
              help="Score chat messages (for a reward model trained on a conversational export).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@pass_settings
def sample_command(settings: Settings, reward_model, policy, n, prompts_file, temperature, top_p, top_k,
                   max_new_tokens, batch_size, seed, conversational, as_json):
    """Best-of-n sampling: sample N responses per prompt, score them with a reward model, keep the best.

    All N responses are stored as candidates, with the reward model's scores as a
    ranking by an AI annotator named after the reward model, so that
    `preflab bon estimate --from-db --proxy MODEL_VERSION` estimates every n ≤ N.
    Re-running the same settings samples only the prompts not yet done.

    Example: preflab bon sample --reward-model rm-v1 --n 8 --prompts prompts.jsonl
    """
    import numpy as np

    from preflab.db.engine import open_sessions
    from preflab.console import Reporter
    from preflab.labelling.selection import prompts_from_file
    from preflab.training.models.names import resolve_model
    from preflab.training.bestofn.estimator import estimate
    from preflab.training.bestofn.kl import beirami_kl_log, kl_bound
    from preflab.training.bestofn.sample import BonSampleConfig, best_of_n, reward_model_version
    from preflab.training.bestofn.sources import db_groups
    from preflab.training.models.loading import load_causal_lm, load_sequence_scorer

    config = BonSampleConfig(n=n, temperature=temperature, top_p=top_p, top_k=top_k,
                             max_new_tokens=max_new_tokens, batch_size=batch_size, seed=seed,
                             conversational=conversational)
    sessions = open_sessions(settings.database_url)
    with sessions.begin() as session:
        version = reward_model_version(session, reward_model)
        reward_path = version.path
        label, location, policy_version_id = resolve_model(session, policy or settings.model)
    prompt_ids = prompts_from_file(sessions, prompts_file) if prompts_file else None
    policy_model, policy_tokenizer = load_causal_lm(location)
    reward, reward_tokenizer = load_sequence_scorer(reward_path)
    with Reporter(not as_json).progress("best-of-n", None) as advance:
        summary = best_of_n(sessions, policy_model, policy_tokenizer, label, policy_version_id, reward,
                            reward_tokenizer, reward_model, reward_path, config, prompt_ids, progress=advance)
    report = summary.as_dict()
    selected = summary.selected
    report["kl_bound"] = float(kl_bound(n))
    # Beirami et al.: ε is the sampling probability of each kept response.
    report["kl_beirami"] = (float(np.mean(beirami_kl_log([s.logprob for s in selected], n)))
                            if selected else None)
    with sessions.begin() as session:
        groups, _ = db_groups(session, reward_model)
    largest = max(p.size for _, p, _ in groups)
    est = estimate([(p, None) for _, p, _ in groups], parse_ns("pow2", largest))
    report["estimate"] = {"n": est.n, "proxy": est.proxy, "groups": est.groups, "kl_bound": est.kl_bound}
    if as_json:
        echo_json(report)
        return
    if not selected:
        click.echo(f"nothing to sample: these {summary.kept:,} prompts were sampled with these settings before")
        return
    mean = float(np.mean([s.mean_score for s in selected]))
    best = float(np.mean([s.score for s in selected]))
    click.echo(f"best-of-{n} over {summary.prompts:,} prompts with {label}: reward {mean:.3f} (mean draw) → "
               f"{best:.3f} (kept); KL ≤ {report['kl_bound']:.3f} nats, Beirami's estimate "
               f"{report['kl_beirami']:.3f}; {summary.stored:,} new candidates, {summary.duplicates:,} repeated "
               f"draws, {summary.kept:,} prompts already done")
    click.echo(f"estimate every n ≤ {largest} with: preflab bon estimate --from-db --proxy {reward_model}")
