"""A simulated world of annotators, careful and careless, ranking candidates of known quality.

Each prompt has candidates whose true order is their index order (0 is best).
Careful annotators rank that order, now and then swapping two neighbours;
careless ones rank at random (and fast), or submit the order shown untouched.
The world writes what Label Studio would export (tasks with the candidates in
the order shown, annotations with a ranker result and a `lead_time`) and a gold
file for some of its prompts.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

Order = list[int]


def careful(rng: random.Random, shown: Order) -> tuple[Order, float]:
    order = sorted(shown)
    if rng.random() < 0.3:
        i = rng.randrange(len(order) - 1)
        order[i], order[i + 1] = order[i + 1], order[i]
    return order, rng.uniform(15, 60)


def random_order(rng: random.Random, shown: Order) -> tuple[Order, float]:
    return rng.sample(shown, len(shown)), rng.uniform(1, 3)


def as_shown(rng: random.Random, shown: Order) -> tuple[Order, float]:
    return list(shown), rng.uniform(6, 20)


BEHAVIOURS: dict[str, Callable[[random.Random, Order], tuple[Order, float]]] = {
    "careful": careful,
    "random": random_order,
    "shown": as_shown,
}


@dataclass
class World:
    prompts: list[str]
    responses: list[list[str]]
    gold: list[int]  # indices of the prompts with a gold answer
    shown: list[Order]  # per prompt, the candidate indices in the order shown

    def gold_lines(self) -> str:
        return "".join(
            json.dumps(
                {
                    "prompt": self.prompts[p],
                    "responses": self.responses[p],
                    "ranking": [[i] for i in range(len(self.responses[p]))],
                }
            )
            + "\n"
            for p in self.gold
        )


def make_world(n_prompts: int = 30, n_candidates: int = 5, n_gold: int = 6, seed: int = 0) -> World:
    rng = random.Random(seed)
    prompts = [f"Question {p}: explain idea number {p} [{seed}]" for p in range(n_prompts)]
    responses = [
        [f"answer {i} to question {p} (quality rank {i})" for i in range(n_candidates)] for p in range(n_prompts)
    ]
    shown = [rng.sample(range(n_candidates), n_candidates) for _ in range(n_prompts)]
    return World(prompts, responses, rng.sample(range(n_prompts), n_gold), shown)


def annotate(world: World, behaviour: str, rng: random.Random) -> list[tuple[Order, float]]:
    """One annotator's (order best first, seconds) for every prompt."""
    return [BEHAVIOURS[behaviour](rng, shown) for shown in world.shown]


def export_file(world: World, annotators: dict[int, str], path: Path, seed: int = 0) -> Path:
    """A Label Studio JSON export: one task per prompt, annotated by every user id in `annotators`."""
    rng = random.Random(seed + 1)
    work = {uid: annotate(world, behaviour, rng) for uid, behaviour in annotators.items()}
    tasks = []
    for p, shown in enumerate(world.shown):
        items = [
            {"id": f"a{i}", "title": f"Response {n + 1}", "body": world.responses[p][i]} for n, i in enumerate(shown)
        ]
        annotations = [
            {
                "id": 1000 * (p + 1) + uid,
                "completed_by": uid,
                "lead_time": round(work[uid][p][1], 2),
                "result": [
                    {
                        "from_name": "rank",
                        "to_name": "responses",
                        "type": "ranker",
                        "value": {"ranker": {"rank": [f"a{i}" for i in work[uid][p][0]]}},
                    }
                ],
            }
            for uid in annotators
        ]
        tasks.append({"id": p + 1, "data": {"prompt": world.prompts[p], "items": items}, "annotations": annotations})
    path.write_text(json.dumps(tasks), encoding="utf-8")
    return path
