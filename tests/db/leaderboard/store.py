"""A real store of rankings of model versions' replies, made the way a user makes one."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
from sqlalchemy import update

from preflab.db.ingest.jsonl import import_file, import_rankings_batch
from preflab.db.models import Candidate, ModelVersion
from tests.db.helpers import ranking_line, write_lines
from tests.db.leaderboard.simulate import simulate

BASE = "HuggingFaceTB/SmolLM2-135M-Instruct"
# Three versions of one policy and its base, as `preflab generate --model VERSION` stores them:
# every candidate's `model` is the base's hub id, and its model version names it.
VERSIONS = {"base": 0.0, "policy-v1": 150.0, "policy-v2": 300.0, "policy-v3": 450.0}
TIE_RATES = (0.05, 0.1)  # ties that these gaps allow (simulate.py)


def import_lines(sessions, path: Path, lines, source: str = "import") -> None:
    """Import JSON Lines rankings; `source`: the rankings' source, as a dataset import names its own."""
    import_file(sessions, write_lines(path, lines), partial(import_rankings_batch, source=source))


def simulated_store(sessions, path: Path, prompts: int = 150, seed: int = 0) -> None:
    """Two people rank two replies of every prompt as the strengths say; an AI judge ranks them backwards.

    The replies of stronger versions are longer (so style control has something to
    take out), and the rankings of a third of the prompts are of source `import:arena`.
    """
    rng = np.random.default_rng(seed)
    names = list(VERSIONS)
    lines, arena = [], []
    for p in range(prompts):
        for person in ("ana", "ben"):
            a, b, outcome, _ = simulate(list(VERSIONS.values()), 1, rng, TIE_RATES)
            pair = [names[a[0]], names[b[0]]]
            replies = [f"prompt {p}, {person}, {m}: " + "word " * (10 + 5 * names.index(m)) for m in pair]
            tiers = [[0], [1]] if outcome[0] == 1 else [[1], [0]] if outcome[0] == 0 else [[0, 1]]
            into = arena if p % 3 == 0 else lines
            into.append(ranking_line(f"question {p}", replies, tiers, annotator=person, model=pair, id=f"{p}-{person}"))
            into.append(
                ranking_line(
                    f"question {p}",
                    replies,
                    tiers[::-1],
                    annotator="judge",
                    kind="ai",
                    model=pair,
                    id=f"{p}-{person}-judge",
                )
            )
    import_lines(sessions, path, lines)
    import_lines(sessions, path.with_name(f"arena-{path.name}"), arena, source="import:arena")
    with sessions.begin() as session:
        name_versions(session)


def name_versions(session) -> None:
    """Make each candidate's `model` a model version's, and the hub id the candidate's `model`."""
    for name in VERSIONS:
        version = ModelVersion(name=name, kind="policy", base_model=BASE)
        session.add(version)
        session.flush()
        session.execute(
            update(Candidate).where(Candidate.model == name).values(model_version_id=version.id, model=BASE)
        )
