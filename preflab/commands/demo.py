"""`preflab demo …`: self-contained demonstrations with a known answer.

The commands parse options and print; the demos themselves are library jobs
(`preflab.training.demos.bon.bon_demo`, `preflab.training.demos.toy.toy_demo`,
`preflab.training.goodhart.job.goodhart_demo`).
"""

from __future__ import annotations

from dataclasses import asdict

import click
from click.core import ParameterSource

from preflab.commands.options import build_config, config_options, echo_result, json_option, pass_settings
from preflab.console import Reporter
from preflab.settings import Settings
from preflab.training.demos.bon import BonDemoConfig
from preflab.training.demos.toy_config import ToySettings
from preflab.training.goodhart.job import GoodhartSettings


def _given_database(settings: Settings) -> str | None:
    """The database given with --database-url or PREFLAB_DATABASE_URL; None for the demo's own file."""
    source = click.get_current_context().find_root().get_parameter_source("database_url")
    explicit = source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    return settings.database_url if explicit else None


@click.group("demo")
def demo_group():
    """Self-contained demonstrations with a known answer.

    Example: preflab demo toy --json
    """


@demo_group.command("bon")
@config_options(BonDemoConfig)
@click.option(
    "--out", type=click.Path(dir_okay=False), help="Where to write the plot (default: DATA_DIR/bon-demo.png)."
)
@json_option
def bon_command(out, as_json, **fields):
    """The best-of-n notebook's toy: true vs proxy reward as n grows, and the plot.

    Example: preflab demo bon --seed 1 --out bon.png
    """
    from preflab.training.demos.bon import bon_demo

    config = build_config(BonDemoConfig, fields)
    result = bon_demo(config, out)
    echo_result(as_json, result.as_json() | asdict(config), lambda: _bon_text(result, config))


def _bon_text(result, config: BonDemoConfig) -> str:
    """The toy's table per n, how it was computed, and the notebook's numbers beside these."""
    lines = [f"{'n':>5}  {'true':>6}  {'proxy':>6}  {'true MC':>7}  {'proxy MC':>8}  {'no noise':>8}  {'KL':>6}"]
    for row in zip(result.n, result.true, result.proxy, result.true_mc, result.proxy_mc, result.no_noise, result.kl):
        n, t, p, tm, pm, nn, kl = row
        lines.append(f"{n:>5}  {t:>6.3f}  {p:>6.3f}  {tm:>7.3f}  {pm:>8.3f}  {nn:>8.3f}  {kl:>6.3f}")
    lines.append(
        f"true/proxy: unbiased estimator over {config.samples:,} samples (every n-subset); "
        f"MC: {config.trials} fresh best-of-n draws per n; no noise: 3 + 2n/(n+1); KL: log n − (n−1)/n"
    )
    lines.append(
        f"notebook: true 4.30 → 5.00, proxy 4.28 → 5.08; here: true {result.true[0]:.2f} → "
        f"{result.true[-1]:.2f}, proxy {result.proxy[0]:.2f} → {result.proxy[-1]:.2f}; plot: {result.plot}"
    )
    return "\n".join(lines)


@demo_group.command("toy")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False),
    help="Folder for the models, rankings and dataset (default: DATA_DIR/demo-toy).",
)
@config_options(ToySettings)
@json_option
@pass_settings
def toy_command(settings: Settings, workdir, as_json, **fields):
    """The digit world of the minimal-RLHF notebook: reward model and DPO (or RL) with a known answer.

    With --world history, the instruction (which digit to start with) is in an
    earlier turn of each conversation, and DPO learns to follow it from the
    conversational export. Uses the database given with --database-url (or
    PREFLAB_DATABASE_URL), else a fresh SQLite file in the work folder, so the
    toy never mixes with real data.

    Example: preflab demo toy --method rl --json
    """
    from preflab.training.demos.toy import toy_demo

    result = toy_demo(
        build_config(ToySettings, fields), workdir, _given_database(settings), reporter=Reporter(not as_json)
    )
    echo_result(as_json, result, lambda: _toy_text(result))


def _toy_text(result: dict) -> str:
    """What the toy built, and how far its policy moved toward the known answer."""
    if result["world"] == "history":
        return (
            f"{result['rankings']:,} ranked conversations → {result['pairs']:,} pairs → "
            f"{result['dataset']['name']} (conversational; {result['dataset']['train']:,} train / "
            f"{result['dataset']['test']:,} test pairs)\n"
            f"DPO policy {result['policy_model_version']} follows the earlier turn's instruction "
            f"{result['follow_rate_before']:.3f} → {result['follow_rate_after']:.3f} of the time on "
            f"{result['held_out_conversations']} held-out conversations (sampled replies: "
            f"{result['sampled_follow_rate_before']:.1%} → {result['sampled_follow_rate_after']:.1%}); "
            f"base rule kept in {result['base_rule_rate_after']:.1%} of samples "
            f"(base model {result['base_rule_rate_before']:.1%})"
        )
    return (
        f"{result['rankings']:,} rankings → {result['pairs']:,} pairs → {result['dataset']['name']} "
        f"({result['dataset']['train']:,} train / {result['dataset']['test']:,} test pairs)\n"
        f"reward model {result['reward_model_version']}: held-out pairwise accuracy {result['rm_accuracy']:.3f}\n"
        f"{result['method']} policy {result['policy_model_version']}: P(preferred first digit) "
        f"{result['p_preferred_before']:.3f} → {result['p_preferred_after']:.3f} on "
        f"{result['held_out_prompts']} held-out prompts; KL to base {result['kl_to_base']:.3f} nats; "
        f"base rule kept in {result['base_rule_rate_after']:.1%} of samples "
        f"(base model {result['base_rule_rate_before']:.1%}); P(EOS after 4 digits) "
        f"{result['stop_rate_before']:.3f} → {result['stop_rate_after']:.3f}"
    )


@demo_group.command("goodhart")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False),
    help="Folder for the models, rankings, datasets and chart (default: DATA_DIR/demo-goodhart).",
)
@config_options(GoodhartSettings)
@json_option
@pass_settings
def goodhart_command(settings: Settings, workdir, as_json, **fields):
    """Best-of-n, DPO, SimPO and RL against one imperfect proxy, on a world whose true reward is known.

    The counting world's annotator ranks base samples for a limited number of
    prompts; a reward model fitted to them is the proxy. Each method optimises the
    base policy against that preference; every policy is scored exactly: KL to the
    base, proxy and true reward, true-reward win rate. Writes goodhart.png (reward
    against √KL with Gao et al.'s fit per method, and win rates) and says what it
    shows. Uses --database-url if given, else a fresh SQLite file in the work folder.

    Example: preflab demo goodhart --rl-betas 0.01,0.05,0.2 --json
    """
    from preflab.training.goodhart.job import goodhart_demo

    result = goodhart_demo(
        build_config(GoodhartSettings, fields), workdir, _given_database(settings), reporter=Reporter(not as_json)
    )
    echo_result(as_json, result, lambda: _goodhart_text(result))


def _goodhart_text(result: dict) -> str:
    """Each policy's KL, proxy and true reward and win rate, what they show, and where the chart is."""
    from preflab.training.goodhart.frontier import describe

    lines = [f"{'method':<10} {'setting':<11} {'KL':>6} {'proxy':>7} {'true':>7} {'win':>6}"]
    for p in [result["reference"], *result["points"]]:
        lines.append(
            f"{p['method']:<10} {p['setting']:<11} {p['kl']:>6.3f} {p['proxy']:>7.3f} {p['true']:>7.3f} "
            f"{p['win_rate']:>6.3f}"
        )
    findings = describe(result["findings"], result["comparisons_sweep"])
    return "\n".join([*lines, *findings, f"chart: {result['chart']}"])
