"""`preflab generate`: sample N candidate responses per prompt."""

from __future__ import annotations

import click

from preflab.console import echo_json, pass_settings
from preflab.settings import Settings


@click.command("generate")
@click.option("--model", "model_name", metavar="ID_OR_PATH",
              help="Causal LM (hub id, path, embedded name or model version); default: the global --model.")
@click.option("-n", "--n", "n", type=int, default=4, show_default=True, help="Candidates per prompt from this model.")
@click.option("--temperature", type=float, default=0.7, show_default=True, help="Sampling temperature.")
@click.option("--top-p", type=float, default=0.9, show_default=True, help="Nucleus sampling mass.")
@click.option("--max-new-tokens", type=int, default=256, show_default=True, help="Longest response in tokens.")
@click.option("--batch-size", type=int, default=8, show_default=True, help="Sequences per forward pass.")
@click.option("--seed", type=int, default=0, show_default=True, help="Base random seed.")
@click.option("--prompts", "prompts_file", type=click.Path(dir_okay=False),
              help="JSON Lines prompts to import and generate for (default: every stored prompt).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@pass_settings
def generate_command(settings: Settings, model_name, n, temperature, top_p, max_new_tokens, batch_size, seed,
                     prompts_file, as_json):
    """Sample N responses per prompt and store them as candidates; re-runs top up to N.

    Example: preflab generate -n 4 --prompts prompts.jsonl --max-new-tokens 128
    """
    from preflab.db.engine import open_sessions
    from preflab.console import Reporter
    from preflab.labelling.generation import GenerateConfig, generate_candidates, prompts_needing
    from preflab.labelling.selection import prompts_from_file
    from preflab.training.models.names import resolve_model
    from preflab.training.models.loading import load_causal_lm

    config = GenerateConfig(n=n, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                            batch_size=batch_size, seed=seed)
    sessions = open_sessions(settings.database_url)
    prompt_ids = prompts_from_file(sessions, prompts_file) if prompts_file else None
    with sessions.begin() as session:
        label, location, version_id = resolve_model(session, model_name or settings.model)
        todo = prompts_needing(session, label, n, prompt_ids)
    if todo:
        model, tokenizer = load_causal_lm(location)
        with Reporter(not as_json).progress("generating", sum(n - have for _, _, have in todo)) as advance:
            summary = generate_candidates(sessions, model, tokenizer, label, config, prompt_ids, version_id, advance)
    else:
        from preflab.labelling.generation import GenerateSummary

        summary = GenerateSummary()
    report = {"model": label, **summary.as_dict()}
    if as_json:
        echo_json(report)
        return
    click.echo(f"generated {summary.stored:,} candidates for {summary.prompts:,} prompts with {label} "
               f"({summary.duplicates:,} duplicates, {summary.empty:,} empty, {summary.short:,} prompts short of {n})")


from preflab.labelling.pipeline import pipeline_command  # noqa: E402  (moves here with the thin-command split)
