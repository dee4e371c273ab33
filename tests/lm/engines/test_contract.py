"""One engine contract (issue 47 §1): callers ask an engine's capabilities, never which engine they hold.

- Both engines are `Engine`s, opened by `open_engine` alone, and say where they differ through
  their capabilities.
- No module outside `lm/engines/` names an engine's kind ("transformers", "openai"), asks whether
  it is on a server, builds an engine itself or reaches into one's config: the source is read.
- `EngineConfig()` is the same whatever the environment: the commands read PREFLAB_ENGINE and
  OPENAI_BASE_URL through their options (tests/lm/engines/test_config.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from preflab.lm.engines import Engine, EngineConfig, open_engine

ROOT = Path(__file__).resolve().parents[3]
# The packages above the engines: every caller of one.
CALLERS = ("lm", "labelling", "training", "report", "preflab")
KIND = re.compile(
    r"""[=!]=\s*["'](transformers|openai)["']"""  # a comparison with an engine's kind
    r"""|["'](transformers|openai)["']\s*[=!]="""
    r"""|\.remote\b|\bon_server\b"""  # "is it on a server?"
    r"""|\bengine\.engine\b|\bengine\.config\.|\.kind\s*==\s*["']transformers"""  # its kind, its server config
    r"""|\b(TransformersEngine|OpenAIEngine)\b|lm\.engines\.(local|remote) import"""  # an engine built by hand
)


def test_no_caller_names_an_engines_kind():
    found = []
    for package in CALLERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            if (ROOT / "lm" / "engines") in path.parents:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if KIND.search(line.split("#")[0]):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "ask the engine's capabilities instead:\n" + "\n".join(found)


def test_both_engines_keep_the_contract(sqlite_url):
    from preflab.db.engine import open_database, session_factory
    from preflab.lm.engines.local import TransformersEngine
    from preflab.lm.engines.remote import OpenAIEngine

    sessions = session_factory(open_database(sqlite_url))  # nothing is stored: one database is enough
    in_process = open_engine(EngineConfig(), sessions, model="anything")
    with open_engine(EngineConfig(engine="openai", api_base="http://127.0.0.1:9/v1", model="m"), sessions) as served:
        for engine, kind in ((in_process, TransformersEngine), (served, OpenAIEngine)):
            assert isinstance(engine, Engine) and isinstance(engine, kind)
        # Where they differ, they say so.
        assert (served.stores_answers, served.prefix_ordering, served.sample_logprobs) == (True, True, False)
        assert (in_process.stores_answers, in_process.prefix_ordering, in_process.sample_logprobs) == (
            False,
            False,
            True,
        )
        assert served.concurrency == 32 and in_process.concurrency == 1
        assert served.samples_top_k is False and in_process.samples_top_k is True
        assert served.name == "openai:m" and served.spent()["currency"] == "USD"


def test_the_library_config_reads_no_environment(monkeypatch):
    monkeypatch.setenv("PREFLAB_ENGINE", "openai")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    assert EngineConfig().engine == "transformers" and EngineConfig().api_base is None
    assert EngineConfig(engine="openai", model="m").urls() == ["https://api.openai.com/v1"]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (("judge-b", "http://gpu-2:8000/v1", None), ("openai", "judge-b", "http://gpu-2:8000/v1")),
        (("judge-c", None, None), ("openai", "judge-c", "http://gpu-1:8000/v1")),
        (("./local", None, "transformers"), ("transformers", "./local", "http://gpu-1:8000/v1")),
    ],
)
def test_a_panel_member_is_the_config_for_its_model(given, expected):
    config = EngineConfig(engine="openai", api_base="http://gpu-1:8000/v1", model="judge-a", concurrency=8)
    member = config.for_model(*given)
    assert (member.engine, member.model, member.api_base) == expected and member.concurrency == 8
