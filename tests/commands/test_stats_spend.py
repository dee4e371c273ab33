"""`preflab stats`: the total spend on model servers, by served model, by judge and by generator, in the currency
the prices were given in (issue 46, 1i).

The tokens are counted back independently from what the fault app was asked (its usage is one token per
word of the rendered prompt, one per word of the reply), not read from the store the command sums.
"""

from __future__ import annotations

import json

import pytest

from tests.fault_app import TOKEN, rendered
from tests.lm.engines.conftest import fault_server, no_outside_server  # noqa: F401  (fixtures)


def served(url: str, model: str, *more) -> list[str]:
    return ["--engine", "openai", "--api-base", url, "--model", model, *map(str, more)]


def tokens_asked(faults) -> tuple[int, int]:
    """(prompt tokens, reply tokens) of every answer the app gave, as its usage counts them."""
    tokens_in = tokens_out = 0
    for body, times in faults.served.items():
        body = json.loads(body)
        tokens_in += times * len(TOKEN.findall(rendered(body["messages"], body)))
        extra = body.get("extra_body") or {}
        if body.get("structured_outputs") or extra.get("structured_outputs"):
            tokens_out += times  # one choice, one word
        else:
            tokens_out += times * min(int(body.get("max_tokens") or 16), 8)
    return tokens_in, tokens_out


def test_stats_sums_the_spend_by_served_model_and_by_judge_in_the_prices_currency(cli, fault_server, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Why is {k} odd?"}) + "\n" for k in range(3)), encoding="utf-8")
    gen_url, gen_faults = fault_server(model="writer")
    judge_url, judge_faults = fault_server(model="grader")
    cli(
        "generate",
        *served(
            gen_url, "writer", "--prompts", prompts, "-n", 2, "--price-in", 1, "--price-out", 2, "--currency", "EUR"
        ),
    )
    cli("judge", "pairwise", *served(judge_url, "grader", "--price-in", 3, "--price-out", 4, "--currency", "EUR"))
    cli("judge", "pairwise", *served(judge_url, "grader", "--price-in", 3, "--price-out", 4, "--currency", "EUR"))

    spend = json.loads(cli("stats", "--json").stdout)["spend"]
    writer_in, writer_out = tokens_asked(gen_faults)
    grader_in, grader_out = tokens_asked(judge_faults)
    writer, grader = spend["by_model"]["writer"], spend["by_model"]["grader"]
    assert (writer["answers"], writer["tokens_in"], writer["tokens_out"]) == (6, writer_in, writer_out)
    assert (grader["answers"], grader["tokens_in"], grader["tokens_out"]) == (6, grader_in, grader_out)
    writer_cost = (writer_in * 1 + writer_out * 2) / 1e6
    grader_cost = (grader_in * 3 + grader_out * 4) / 1e6
    assert (writer["cost"], writer["currency"]) == (pytest.approx(writer_cost, abs=1e-6), "EUR")
    assert (grader["cost"], grader["currency"]) == (pytest.approx(grader_cost, abs=1e-6), "EUR")
    assert spend["total"]["cost"] == {"EUR": pytest.approx(writer_cost + grader_cost, abs=1e-6)}
    assert (spend["total"]["tokens_in"], spend["total"]["unpriced_models"]) == (writer_in + grader_in, 0)

    # By judge: its runs and what they sent (the second had every ranking already: it asked nothing), by its name.
    (judge,) = spend["by_judge"]
    assert judge["name"].startswith("judge:pairwise:") and judge["name"].endswith(":openai:grader")
    assert (judge["runs"], judge["requests"], judge["cache_hits"]) == (2, 6, 0)
    assert (judge["cost"], judge["currency"]) == (pytest.approx(grader_cost, abs=1e-6), "EUR")
    (generator,) = spend["by_generator"]
    assert (generator["name"], generator["runs"], generator["requests"]) == ("openai:writer", 1, 6)
    assert generator["cost"] == pytest.approx(writer_cost, abs=1e-6)

    text = cli("stats").stdout
    assert (
        f"engine writer: 6 answers stored (0 quarantined), {writer_in:,} tokens in, {writer_out:,} out, cost " in text
    )
    assert (
        f"spent on model servers: {writer_in + grader_in:,} tokens in, {writer_out + grader_out:,} out, cost " in text
    )
    assert f"cost {writer_cost + grader_cost:,.4f} EUR" in text
    assert f"by judge {judge['name']}: 2 runs, 6 requests (0 answered from the store)" in text


def test_a_served_model_with_no_price_says_so(cli, fault_server, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "Why?"}) + "\n", encoding="utf-8")
    url, _ = fault_server()
    cli("generate", *served(url, "fault-model", "--prompts", prompts, "-n", 1))
    spend = json.loads(cli("stats", "--json").stdout)["spend"]
    assert spend["by_model"]["fault-model"]["cost"] is None and spend["total"]["cost"] == {}
    assert spend["total"]["unpriced_models"] == 1
    assert "no price given (--price-in, --price-out)" in cli("stats").stdout
    bad = cli("generate", *served(url, "fault-model", "--currency", "€"), expect_ok=False)
    assert bad.exit_code != 0 and "--currency names a currency in letters" in bad.output
