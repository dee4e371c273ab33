"""`preflab bon …`: best-of-n estimates, exact KL and win rate, the Goodhart plot, sampling."""

from __future__ import annotations

import click

from preflab.commands.engine_options import engine_config, engine_line, engine_options
from preflab.commands.options import build_config, config_options, echo_result, json_option, pass_settings
from preflab.console import Reporter, plural
from preflab.errors import InputError
from preflab.settings import Settings
from preflab.training.bestofn.config import BON_DEFAULTS, BonSampleConfig


@click.group("bon")
def bon_group():
    """Best-of-n analysis: how far the policy moved (KL) and whether the true reward followed.

    Example: preflab bon estimate samples.jsonl --n 1,2,4,8
    """


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
        from preflab.training.bestofn.jobs import db_samples

        with open_sessions(settings.database_url, existing=True).begin() as session:
            return db_samples(session, proxy, true)
    if proxy or true:
        raise InputError("--proxy and --true name annotators in the database: add --from-db")
    if not path:
        raise InputError("give a JSON Lines FILE or --from-db --proxy NAME")
    from preflab.training.bestofn.sources import read_jsonl

    return read_jsonl(path), str(path)


def source_options(command):
    """FILE | --from-db --proxy NAME [--true NAME|human], shared by estimate and plot."""
    for decorator in reversed(
        [
            click.argument("path", metavar="[FILE]", required=False, type=click.Path(dir_okay=False)),
            click.option("--from-db", is_flag=True, help="Read scores and rankings from the database."),
            click.option(
                "--proxy", metavar="NAME", help="With --from-db: the AI annotator (judge or reward model) optimised."
            ),
            click.option(
                "--true",
                "true_name",
                metavar="NAME|human",
                help="With --from-db: another annotator's scores, or 'human' (mean Borda of human rankings).",
            ),
        ]
    ):
        command = decorator(command)
    return command


def _fmt(value, spec: str = ".4f") -> str:
    return "—" if value is None else format(value, spec)


@bon_group.command("estimate")
@source_options
@click.option("--n", "ns", default="pow2", show_default=True, help="Comma-separated n values, 'pow2' or 'all'.")
@json_option
@pass_settings
def estimate_command(settings: Settings, path, from_db, proxy, true_name, ns, as_json):
    """Estimate E[true] and E[proxy] under best-of-n for each n, from N ≥ n samples per group.

    FILE is JSON Lines, one sample a line: {"group": "prompt-17", "proxy": 0.83, "true": 1.0}
    (`true` optional). Each group's samples serve every n at once (the unbiased
    estimator over all n-subsets); the mean is over groups with ≥ n samples.

    Example: preflab bon estimate --from-db --proxy rm-v3 --true human --n 1,2,4,8
    """
    from preflab.training.bestofn.jobs import estimate_groups

    groups, described = load_groups(settings, path, from_db, proxy, true_name)
    result = estimate_groups(groups, ns)
    echo_result(as_json, result.as_json(), lambda: _estimate_text(result, groups, described))


def _estimate_text(result, groups, described: str) -> str:
    """The estimate per n, and what it was estimated from."""
    lines = [f"{'n':>6}  {'true':>9}  {'± stderr':>9}  {'proxy':>9}  {'groups':>6}  {'KL bound':>8}"]
    for n, t, se, p, g, kl in zip(
        result.n, result.true, result.true_stderr, result.proxy, result.groups, result.kl_bound
    ):
        lines.append(f"{n:>6}  {_fmt(t):>9}  {_fmt(se):>9}  {_fmt(p):>9}  {g:>6}  {kl:>8.3f}")
    samples = sum(p.size for _, p, _ in groups)
    lines.append(f"best-of-n over {len(groups):,} groups ({samples:,} samples; {described})")
    return "\n".join(lines)


@bon_group.command("kl")
@click.option("--probs", required=True, help="Reference probabilities of the outcomes, comma-separated (sum 1).")
@click.option("--rewards", required=True, help="The reward of each outcome, comma-separated.")
@click.option("--n", "ns", default="1,2,4,8,16", show_default=True, help="Comma-separated n values.")
@json_option
def kl_command(probs, rewards, ns, as_json):
    """Exact KL and win rate of best-of-n for a discrete reference, beside their bounds.

    Prints per n: the exact KL(best-of-n ‖ P), the log n − (n−1)/n bound, Beirami
    et al.'s estimate (its expectation under best-of-n), the exact win rate
    against one draw from P (ties ½) and the n/(n+1) bound.

    Example: preflab bon kl --probs 0.5,0.3,0.2 --rewards 3,2,1 --n 1,2,4
    """
    from preflab.training.bestofn.jobs import parse_ns
    from preflab.training.bestofn.kl import theory

    result = theory(parse_floats(probs, "--probs"), parse_floats(rewards, "--rewards"), parse_ns(ns))
    echo_result(as_json, result.as_json(), lambda: _theory_text(result))


def _theory_text(result) -> str:
    lines = [f"{'n':>6}  {'KL exact':>9}  {'KL bound':>9}  {'Beirami':>9}  {'win rate':>9}  {'n/(n+1)':>9}"]
    for row in zip(
        result.n, result.kl_exact, result.kl_bound, result.kl_beirami, result.win_rate, result.win_rate_bound
    ):
        n, *values = row
        lines.append(f"{n:>6}  " + "  ".join(f"{v:>9.4f}" for v in values))
    return "\n".join(lines)


@bon_group.command("plot")
@source_options
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The image to write (.png, .svg, .pdf).")
@click.option("--n", "ns", default="all", show_default=True, help="Comma-separated n values, 'pow2' or 'all'.")
@json_option
@pass_settings
def plot_command(settings: Settings, path, from_db, proxy, true_name, out, ns, as_json):
    """Draw the Goodhart picture: true and proxy reward against KL with the fitted R(d), and win rate.

    Reads samples like `bon estimate`; without FILE or --from-db it draws the
    best-of-n notebook's toy (see `preflab demo bon`).

    Example: preflab bon plot samples.jsonl --out goodhart.png
    """
    from preflab.training.bestofn.jobs import plot_groups

    if path or from_db or proxy or true_name:
        groups, described = load_groups(settings, path, from_db, proxy, true_name)
    else:
        from preflab.training.demos.bon import toy_groups

        groups, described = toy_groups(), "the notebook toy"
    plot = plot_groups(groups, ns, out, title=described if len(described) < 40 else "best-of-n")
    written, result, fit = plot.path, plot.estimate, plot.fit
    data = {"out": str(written), "n_max": max(result.n), "fit": fit.as_json() if fit else None}
    echo_result(as_json, data, lambda: f"wrote {written} (n = 1 … {max(result.n)}, {described}){_peak(fit)}")


def _peak(fit) -> str:
    if fit and fit.kl_peak is not None:
        return f"; fitted true reward peaks at KL {fit.kl_peak:.2f} nats (n ≈ e^{fit.kl_peak + 1:.1f})"
    return ""


@bon_group.command("sample")
@click.option(
    "--reward-model",
    "reward_model",
    required=True,
    metavar="MODEL_VERSION",
    help="The reward model: a model version of kind 'reward'.",
)
@click.option(
    "--policy",
    metavar="ID_OR_PATH",
    help="The causal LM to sample from (model version, path, hub id; with --engine openai, the served "
    "model's name); default: the global --model.",
)
@click.option(
    "--prompts",
    "prompts_file",
    type=click.Path(dir_okay=False),
    help="JSON Lines prompts to import and sample for (default: every stored prompt).",
)
@config_options(BonSampleConfig, defaults=BON_DEFAULTS)
@engine_options
@json_option
@pass_settings
def sample_command(settings: Settings, reward_model, policy, prompts_file, as_json, **fields):
    """Best-of-n sampling: sample N responses per prompt, score them with a reward model, keep the best.

    All N responses are stored as candidates, with the reward model's scores as a
    ranking by an AI annotator named after the reward model, so that
    `preflab bon estimate --from-db --proxy MODEL_VERSION` estimates every n ≤ N.
    Re-running the same settings samples only the prompts not yet done.
    With --engine openai the policy samples on a server (--policy names the served
    model) and the reward model scores here; a server gives no sampling
    probabilities, so the KL is given by its bound alone.

    Example: preflab bon sample --reward-model rm-v1 --n 8 --prompts prompts.jsonl
    """
    from preflab.db.engine import open_sessions
    from preflab.training.bestofn.jobs import sample_best_of_n

    config = build_config(BonSampleConfig, fields)
    engine = engine_config(fields, policy or settings.model)
    report = sample_best_of_n(
        open_sessions(settings.database_url),
        reward_model,
        policy or settings.model,
        config,
        prompts_file,
        reporter=Reporter(not as_json),
        engine=engine,
    )
    echo_result(as_json, report, lambda: _sampled_text(report, config.n, reward_model))


def _sampled_text(report: dict, n: int, reward_model: str) -> str:
    """What best-of-n sampling kept, what the server would not answer, and what the server was asked."""
    lines = []
    selected = report["selected"]
    if selected:
        mean = sum(s["mean_score"] for s in selected) / len(selected)
        best = sum(s["score"] for s in selected) / len(selected)
        beirami = "n/a" if report["kl_beirami"] is None else f"{report['kl_beirami']:.3f}"
        lines.append(
            f"best-of-{n} over {report['prompts']:,} prompts with {report['policy']}: reward "
            f"{mean:.3f} (mean draw) → {best:.3f} (kept); KL ≤ {report['kl_bound']:.3f} nats, Beirami's "
            f"estimate {beirami}; {report['stored']:,} new candidates, {report['duplicates']:,} repeated "
            f"draws, {report['kept']:,} prompts already done"
        )
        lines.append(
            f"estimate every n ≤ {report['estimate']['largest_group']} with: "
            f"preflab bon estimate --from-db --proxy {reward_model}"
        )
    elif not (report["quarantined"] or report["failed"]):
        lines.append(f"nothing to sample: these {report['kept']:,} prompts were sampled with these settings before")
    lines += _unanswered(report)
    if line := engine_line(report["engine"]):
        lines.append(line)
    return "\n".join(lines)


def _unanswered(report: dict) -> list[str]:
    """What the server would not answer: prompts quarantined (and why), prompts left for the next run."""
    lines = []
    if report["quarantined"]:
        lines.append(
            f"quarantined {plural(report['quarantined'], 'prompt')} the server refused "
            f"(kept with the reason; not asked again)"
        )
    if report["failed"]:
        lines.append(
            f"{plural(report['failed'], 'prompt')} had a draw without an answer after every retry: "
            f"left for the next run"
        )
    return lines + [f"  {count:,} × {reason}" for reason, count in report["reasons"].items()]


@bon_group.command("frontier")
@click.option(
    "--policy",
    required=True,
    metavar="MODEL_VERSION",
    help="The last model version of the lineage (its parents, up to the base model, come with it).",
)
@click.option(
    "--proxy",
    required=True,
    metavar="NAME",
    help="The AI annotator (the reward model's judge) whose reward the lineage optimised.",
)
@click.option(
    "--true",
    "true_name",
    default="human",
    show_default=True,
    metavar="NAME|human",
    help="The truth: held-out human rankings ('human') or another annotator's scores.",
)
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The chart to write (.png, .svg, .pdf).")
@click.option(
    "--chat/--plain",
    default=True,
    show_default=True,
    help="Whether the samples were written through the chat template (as `preflab generate` does).",
)
@click.option(
    "--n",
    "ns",
    default="pow2",
    show_default=True,
    help="Best-of-n on the root's samples: comma-separated n values, 'pow2' or 'all'.",
)
@click.option(
    "--limit",
    type=click.IntRange(1),
    default=2000,
    show_default=True,
    help="At most this many samples per model version.",
)
@json_option
@pass_settings
def frontier_command(settings: Settings, policy, proxy, true_name, out, chat, ns, limit, as_json):
    """The Goodhart frontier of real data: each model version of a lineage, and best-of-n, on one chart.

    Each version's stored samples give its mean proxy reward, its mean true reward,
    its true-reward win rate over the root's samples, and KL to the root estimated
    from its own samples (with the error). Best-of-n uses the root's samples.

    Example: preflab bon frontier --policy policy-7 --proxy reward-3 --true human --out frontier.png
    """
    from preflab.db.engine import open_sessions
    from preflab.training.goodhart.lineage import lineage_frontier

    report = lineage_frontier(
        open_sessions(settings.database_url, existing=True),
        policy,
        proxy,
        true_name,
        out,
        chat,
        ns,
        limit,
        reporter=Reporter(not as_json),
    )
    echo_result(as_json, report, lambda: _frontier_text(report))


def _frontier_text(report: dict) -> str:
    """Each point of the frontier, what it shows, and where the chart is."""
    from preflab.training.goodhart.frontier import describe

    lines = [f"{'method':<10} {'setting':<14} {'KL':>13} {'proxy':>8} {'true':>8} {'win':>6}"]
    for p in report["points"]:
        kl = f"{p['kl']:.3f} ± {p['kl_stderr']:.3f}" if p["kl_stderr"] else f"{p['kl']:.3f}"
        lines.append(
            f"{p['method']:<10} {p['setting']:<14} {kl:>13} {_fmt(p['proxy'], '.3f'):>8} "
            f"{_fmt(p['true'], '.3f'):>8} {_fmt(p['win_rate'], '.3f'):>6}"
        )
    return "\n".join([*lines, *describe(report["findings"]), f"chart: {report['chart']}"])
