"""The text the store's commands print: `stats`, `annotators`, `export`, `import dataset` (`--json`: the dict itself).

The library jobs return data (`preflab.db.quality.agreement.stats`,
`preflab.db.quality.annotators.annotator_quality`, `preflab.db.export.job.version_info`,
`preflab.labelling.judges.trust.judge_trust`);
how it reads on a terminal is the shell's business, so it lives here, beside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from preflab.console import plural
from preflab.db.export.selection import UNPAIRED_NAMES
from preflab.db.models import OVERALL
from preflab.db.quality.agreement import same_as_shown_text

if TYPE_CHECKING:
    from preflab.db.quality.annotators import AnnotatorQuality


def stats_text(report: dict) -> str:
    """The `stats` report as lines of text (no trailing newline: `click.echo` adds it)."""
    c = report["counts"]
    lines = [
        f"prompts {c['prompts']:,} · candidates {c['candidates']:,} · comparisons {c['comparisons']:,}"
        f" · quarantined {c['quarantined']:,}",
        "rankings: " + ", ".join(f"{k} {v:,}" for k, v in c["rankings"].items()),
        "annotators: " + (", ".join(f"{k} {v:,}" for k, v in c["annotators"].items()) or "none"),
        same_as_shown_text(c["same_as_shown"]),
    ]
    # One block per criterion; a store of `overall` rankings only reads as it did before criteria.
    headed = list(report["agreement"]) != [OVERALL]
    for criterion, groups in report["agreement"].items():
        block = []
        for name, a in groups.items():
            if not a["ranking_pairs"]:
                continue
            rate = "n/a" if a["pairwise_agreement"] is None else f"{a['pairwise_agreement']:.3f}"
            tau = "n/a" if a["kendall_tau"] is None else f"{a['kendall_tau']:.3f}"
            block.append(
                f"agreement {name}: {a['ranking_pairs']:,} ranking pairs, {a['shared_pairs']:,} shared pairs,"
                f" pairwise agreement {rate}, Kendall tau-b {tau}"
            )
        if headed:
            n = c.get("valid_rankings_by_criterion", {}).get(criterion, 0)
            nothing = "" if block else "; no two annotators ranked one prompt"
            lines.append(f"criterion {criterion}: {plural(n, 'valid ranking')}{nothing}")
            block = ["  " + line for line in block]
        lines += block
    spend = report.get("spend") or {"by_model": report.get("engine", {}), "by_judge": [], "by_generator": []}
    for model, used in spend["by_model"].items():
        lines.append(
            f"engine {model}: {used['answers']:,} answers stored ({used['quarantined']:,} quarantined),"
            f" {used['tokens_in']:,} tokens in, {used['tokens_out']:,} out{_paid(used)}"
        )
    if spend["by_model"] and "total" in spend:
        total = spend["total"]
        costs = " + ".join(f"{cost:,.4f} {currency}" for currency, cost in sorted(total["cost"].items()))
        lines.append(
            f"spent on model servers: {total['tokens_in']:,} tokens in, {total['tokens_out']:,} out"
            + (f", cost {costs}" if costs else "")
            + (
                f" ({plural(total['unpriced_models'], 'served model')} with no price given)"
                if total["unpriced_models"]
                else ""
            )
        )
    for title, rows in (("judge", spend["by_judge"]), ("generator", spend["by_generator"])):
        for row in rows:
            lines.append(
                f"  by {title} {row['name']}{' (a panel: its members’ own)' if row['panel'] else ''}: "
                f"{plural(row['runs'], 'run')}, {row['requests']:,} requests ({row['cache_hits']:,} answered from the "
                f"store), {row['tokens_in']:,} tokens in, {row['tokens_out']:,} out{_paid(row)}"
            )
    return "\n".join(lines)


def _paid(row: dict) -> str:
    """`, cost 0.0300 USD`; where no price was given `, no price given`; where runs gave several, says so."""
    if row.get("cost") is not None and row.get("currency"):
        return f", cost {row['cost']:,.4f} {row['currency']}"
    if row.get("prices"):
        return f", no cost: its runs gave {len(row['prices'])} different prices"
    return ", no price given (--price-in, --price-out)" if "cost" in row else ""


def qualities_text(by_criterion: dict[str, list[AnnotatorQuality]]) -> str:
    """The `preflab annotators` tables, one per criterion under its name; `overall` alone: its table, unheaded."""
    if list(by_criterion) == [OVERALL]:
        return quality_text(by_criterion[OVERALL])
    return "\n\n".join(f"criterion {name}:\n{quality_text(rows)}" for name, rows in by_criterion.items())


def quality_text(qualities: list[AnnotatorQuality]) -> str:
    """The `preflab annotators` table (no trailing newline)."""
    if not qualities:
        return "no human annotator has a valid ranking yet"

    def num(value: float | None, form: str = ".2f") -> str:
        return "—" if value is None else format(value, form)

    header = (
        f"{'annotator':<20} {'rankings':>8} {'gold n':>6} {'gold τb':>7} {'gold pw':>7} {'cons n':>6} "
        f"{'cons τb':>7} {'cons pw':>7} {'shown':>6} {'median s':>8}  flags"
    )
    lines = [header]
    for q in qualities:
        d = q.as_dict()
        lines.append(
            f"{q.pseudonym:<20} {q.rankings:>8,} {d['gold_rankings']:>6,} {num(d['gold_tau']):>7} "
            f"{num(d['gold_pairwise']):>7} {d['consensus_rankings']:>6,} {num(d['consensus_tau']):>7} "
            f"{num(d['consensus_pairwise']):>7} {num(d['same_as_shown'], '.0%'):>6} "
            f"{num(d['median_seconds'], '.1f'):>8}  {', '.join(q.flags) or '—'}"
        )
    flagged = [q for q in qualities if q.flags]
    lines.append(f"{len(flagged)} of {len(qualities)} annotators flagged")
    for q in flagged:
        lines.extend(f"  {q.pseudonym}: {reason}" for reason in q.flags.values())
    return "\n".join(lines)


def export_summary(info: dict[str, Any], out_dir: str | Path) -> str:
    """The line `preflab export` prints: what was written, whose pairs, and how many contradict."""
    line = (
        f"exported {info['train']:,} train and {info['test']:,} test pairs from {info['prompts']:,} prompts"
        f" to {out_dir} as dataset version {info['name']}"
    )
    build = info.get("pairs_build")
    if build:  # export takes whatever the last `pairs build` made: say which, so nobody is surprised
        line = (
            f"{line}, from the last pairs build (#{build['id']}: strategy {build['strategy']}, "
            f"aggregate {build['aggregate']}, annotators {build['annotator_kind']})"
        )
    if "pairs_by_kind" not in info:
        return line
    kinds = ", ".join(f"{n:,} {kind}" for kind, n in sorted(info["pairs_by_kind"].items()))
    line += f" ({kinds}; annotators {info['annotators']}"
    left_out = info.get("left_out_by_kind") or {}
    if left_out:
        line += "; left out " + ", ".join(f"{n:,} {kind}" for kind, n in sorted(left_out.items()))
    excluded = info.get("excluded_annotators") or {}
    if excluded:
        line += f"; {len(excluded):,} flagged annotator{'s' if len(excluded) != 1 else ''} left out"
    n = info.get("contradicting_pairs", 0)
    line += f"); {n:,} {'pair contradicts' if n == 1 else 'pairs contradict'} another pair of the same prompt"
    unpaired = info.get("unpaired_rankings") or {}
    if unpaired:  # the why in words is in the card and --json; here, how many of each kind
        kinds = ", ".join(plural(n, *UNPAIRED_NAMES.get(why, (why, why))) for why, n in sorted(unpaired.items()))
        line += f"; {plural(sum(unpaired.values()), 'ranking')} gave no pair ({kinds})"
    return line


def dataset_summary(summary: dict[str, Any]) -> str:
    """The line `preflab import dataset` prints: rows read (per split), rankings, ties, duplicates, quarantined."""
    splits = ", ".join(f"{name} {n:,}" for name, n in summary["splits"].items())
    retried = (
        f", {plural(summary['retried'], 'batch', 'batches')} retried after a conflict" if summary["retried"] else ""
    )
    # ties: rankings that are one whole tie; with tied replies: any tier of two or more (the ties among them)
    tied = f", {plural(summary['rankings_with_ties'], 'ranking')} with tied replies"
    if summary.get("identical_replies"):
        voted = f", {summary['identical_ties']:,} voted a tie" if summary.get("identical_ties") else ""
        tied += f", {plural(summary['identical_replies'], 'battle')} of identical replies (no pair{voted})"
    return (
        f"{summary['format']}: read {plural(summary['rows'], 'row')}{f' ({splits})' if splits else ''}: "
        f"{plural(summary['rankings'], 'new ranking')} ({plural(summary['ties'], 'tie')}{tied}), "
        f"{plural(summary['duplicates'], 'duplicate')}, {summary['quarantined']:,} quarantined "
        f"({plural(summary['prompts'], 'new prompt')}, {plural(summary['candidates'], 'new candidate')}{retried})"
    )


def _head(text: str | None, width: int) -> str:
    """`text` in `width` characters, cut from the right: a label's start says what it is."""
    text = text or "—"
    return text if len(text) <= width else text[: width - 1] + "…"


def _cost(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}" if value < 1 else f"{value:,.2f}"


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f}"


def judges_text(trust: dict[str, Any]) -> str:
    """The `preflab stats --judges` table: which judge to trust, best first (no trailing newline)."""
    rows, boot = trust["judges"], trust["bootstrap"]
    if not rows:
        return "no judge has ranked anything yet (see `preflab judge --help`)"

    def num(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.2f}"

    header = (
        f"{'kind':<20} {'prompts':>7} {'pairs':>7}  {'agreement [interval]':<22} {'tau-b':>6} {'$/1k pairs':>10}"
        f" {'pairs/s':>8}  {'position bias':<30}  judge"
    )
    lines = [
        f"which judge to trust, first the highest lower bound of agreement with people "
        f"({boot['level']:.0%} interval: {boot['rounds']:,} bootstrap resamples of the shared prompts, "
        f"seed {boot['seed']})",
    ]
    # One table per criterion (a judge trusted for one may not be for another); `overall` alone: one, unheaded.
    headed = {r.get("criterion", OVERALL) for r in rows} != {OVERALL}
    if not headed:
        lines.append(header)
    for k, r in enumerate(rows):
        if headed and (k == 0 or rows[k - 1]["criterion"] != r["criterion"]):
            lines += [f"criterion {r['criterion']}:", header]
        kind = f"{r['kind']} ({r['method']})" if r["method"] else r["kind"]
        agreement = (
            "n/a (no prompt shared)"
            if not r["shared_prompts"]
            else "n/a (no shared pair)"
            if r["agreement"] is None
            else f"{num(r['agreement'])} (too few prompts)"
            if r["agreement_low"] is None
            else f"{num(r['agreement'])} [{num(r['agreement_low'])}, {num(r['agreement_high'])}]"
        )
        bias = (
            "n/a (imported: not recorded)"
            if r.get("imported")
            else "n/a (scores each reply alone)"
            if r["position_bias"] is None
            else f"{num(r['position_bias'])} (first {num(r['position_first'])}, second {num(r['position_second'])})"
        )
        # The judge's name last and whole (a panel's names its members): what `ls predict --judge` takes.
        source = f" ({r['source']})" if r.get("imported") and r.get("source") else ""
        lines.append(
            f"{_head(kind, 20):<20} {r['shared_prompts']:>7,} {r['shared_pairs']:>7,}  {agreement:<22} "
            f"{num(r['kendall_tau']):>6} {_cost(r.get('cost_per_1000_pairs')):>10} {_rate(r.get('pairs_per_s')):>8}  "
            f"{bias:<30}  {r['judge']}{source}"
        )
    lines.append(
        "position bias: the share of pairs judged in both orders whose verdict followed the position "
        "(the reply shown first won both times, or the one shown second did)"
    )
    lines.append(
        "$/1k pairs: what its runs on a server cost (--price-in, --price-out) per 1,000 candidate pairs "
        "it ranked; pairs/s: pairs ranked per second of its judging"
    )
    return "\n".join(lines)


def _share(cell: dict) -> str:
    """0.842 [0.801, 0.879] (1,234 pairs); a dash where there are no pairs."""
    if cell["accuracy"] is None:
        return "—"
    interval = f" [{cell['low']:.3f}, {cell['high']:.3f}]" if cell.get("low") is not None else ""
    return f"{cell['accuracy']:.3f}{interval} ({plural(cell['pairs'], 'pair')})"


def bench_text(report: dict) -> str:
    """`train eval` of a reward model or pair ranker: the accuracy, its breakdowns, length, position, comparison."""
    b = report["bench"]
    confidence = (
        f"mean reward gap {report['heldout_mean_margin']:.3f}"
        if "heldout_mean_margin" in report
        else f"mean P(chosen ≻ rejected) {report['heldout_mean_probability']:.3f}"
    )  # a pair ranker
    rounds = f"{b['bootstrap']:,} rounds resampling prompts, seed {b['seed']}" if b["bootstrap"] else "no bootstrap"
    lines = [
        f"{report['model_version']}: held-out accuracy {_share(b)} over {plural(b['prompts'], 'prompt')} of "
        f"{report['dataset_version']} ({confidence})",
        f"scored strictly, as RewardBench scores: a tie counts as wrong ({plural(b['ties'], 'tie')}); "
        f"95% intervals from {rounds}",
    ]
    for title, key in (("category", "by_category"), ("annotator kind", "by_annotator_kind"), ("margin", "by_margin")):
        if b[key]:
            lines.append(f"by {title}:")
            width = max(len(row["group"]) for row in b[key])
            lines += [f"  {row['group']:<{width}}  {_share(row)}" for row in b[key]]
    shorter, longer = b["length_bias"]["rows"]
    lines.append(f"length: chosen is the shorter {_share(shorter)}; chosen is the longer {_share(longer)}")
    if b["length_bias"]["gap"] is not None:
        lines[-1] += (
            f"; favours {'longer' if b['length_bias']['gap'] > 0 else 'shorter'} replies by "
            f"{abs(b['length_bias']['gap']):.3f}"
        )
    position = b["position"]
    if not position["applies"]:
        lines.append(f"position: does not apply ({position['why']})")
    else:
        lines.append(
            f"position: chosen shown first {_share(position['chosen_shown_first'])}; shown second "
            f"{_share(position['chosen_shown_second'])}; the order decided "
            f"{position['order_decides']:.1%} of the verdicts"
        )
    if compared := report.get("compare"):
        lines.append(
            f"against {compared['other']} on the same pairs: {compared['accuracy']['accuracy']:.3f} vs "
            f"{compared['other_accuracy']['accuracy']:.3f}, difference {compared['difference']:+.3f}"
            + (
                f" [{compared['low']:+.3f}, {compared['high']:+.3f}], p = {compared['p_value']:.3g} (paired bootstrap)"
                if compared["low"] is not None
                else ""
            )
            + f"; only {report['model_version']} right on {plural(compared['only_this'], 'pair')}, "
            f"only {compared['other']} on {compared['only_other']:,}"
        )
    return "\n".join(lines)
