"""The lineage frontier on conversations: a model version's samples keep their history for the KL estimate."""

from __future__ import annotations

import json

import pytest

from preflab.db.models import ModelVersion
from tests.lm.conversations import (
    FRANCE,
    ITALY,
    tutor_lm,  # noqa: F401 (fixture)
)
from tests.tiny_models import tiny_causal_lm

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lms(tmp_path_factory, tutor_lm):
    return tutor_lm, tiny_causal_lm(tmp_path_factory.mktemp("lineage-history") / "other", seed=5)


def test_samples_of_conversations_are_scored_after_their_history(cli, sessions, lms, tmp_path):
    from preflab.training.goodhart.lineage import mc_kl, version_samples

    tutor, other = lms
    rows = tmp_path / "samples.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"prompt": turns, "responses": [answer], "model": [str(tutor)]}) + "\n"
            for turns, answer in ((FRANCE, "Paris."), (ITALY, "Rome."))
        ),
        encoding="utf-8",
    )
    cli("import", "prompts", rows)
    with sessions.begin() as session:
        version = ModelVersion(name="tutor", kind="policy", path=str(tutor))
        session.add(version)
        session.flush()
        samples = version_samples(session, version, limit=10).samples
    assert [(prompt, reply) for _, _, prompt, reply in samples] == [
        (FRANCE, [{"role": "assistant", "content": "Paris."}]),
        (ITALY, [{"role": "assistant", "content": "Rome."}]),
    ]
    assert mc_kl(str(tutor), str(tutor), samples, False, 4) == (0.0, 0.0)
    # The tutor is sure of each answer after its history; a random model is not: a large log-ratio.
    kl, _ = mc_kl(str(tutor), str(other), samples, False, 4)
    assert kl > 5
