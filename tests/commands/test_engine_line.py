"""One summary line says what a server was asked and cost, the same for every command that asks one."""

from __future__ import annotations

from dataclasses import replace

from preflab.commands.engine_options import engine_line
from preflab.lm.engines.config import EngineStats

ASKED = EngineStats("openai", "grader", requests=120, cache_hits=56, tokens_in=21_480, tokens_out=96, seconds=3.25)


def test_a_servers_line_counts_what_was_sent_and_what_the_store_answered():
    assert engine_line(ASKED.as_dict()) == (
        "openai grader: 120 requests (56 answered from the store), 21,480 tokens in, 96 out, 0 retries, 0 errors, 3.2 s"
    )


def test_the_cost_is_said_where_a_price_was_given_and_a_lost_server_is_named():
    priced = replace(ASKED, price_in=3.0, price_out=15.0, servers_lost=["http://b:8000/v1"]).as_dict()
    assert engine_line(priced).endswith(
        ", cost 0.0659; 1 server stopped answering and the others went on: http://b:8000/v1"
    )
    panel = {**priced, "engine": "panel", "currency": "EUR"}
    del panel["price_in"], panel["price_out"]  # a panel's stats add up its members' costs, not their prices
    assert ", cost 0.0659 EUR;" in engine_line(panel)


def test_in_process_or_asked_nothing_says_nothing():
    assert engine_line(None) == ""
    assert engine_line(EngineStats("transformers", "tiny", requests=8, seconds=1.0).as_dict()) == ""
    assert engine_line(EngineStats("openai", "grader").as_dict()) == ""
