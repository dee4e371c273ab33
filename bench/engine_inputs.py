"""bench_engine_vllm.py's input: prompts and judge records from the bundled samples, each side's fresh store."""

from __future__ import annotations

import json
import math
import random
from importlib.resources import files
from pathlib import Path

# Ways to ask a sample prompt again as a new prompt, when more prompts are asked for than the samples hold.
SUFFIXES = (
    "",
    " Keep it short.",
    " Explain your reasoning.",
    " Answer in one sentence.",
    " Give an example.",
    " Answer as if to a child.",
    " Use a list.",
    " Be precise.",
)
JUDGE_CANDIDATES = 4


def sample_pool() -> dict[str, list[str]]:
    """The bundled sample prompts, each with its own sample responses (none for a prompt of prompts.jsonl only)."""
    samples = files("preflab.db.samples")
    pool: dict[str, list[str]] = {}
    for name in ("prompts.jsonl", "rankings.jsonl"):
        for line in (samples / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                if isinstance(record["prompt"], str):
                    own = pool.setdefault(record["prompt"], [])
                    own += [r for r in record.get("responses", []) if isinstance(r, str) and r not in own]
    return pool


def prompt_variants(bases: list[str], n: int) -> list[tuple[str, str]]:
    """n distinct prompts: (the sample prompt it comes from, its text), each sample again with a suffix once used."""
    out = []
    for i in range(n):
        cycle, k = divmod(i, len(bases))
        suffix = SUFFIXES[cycle] if cycle < len(SUFFIXES) else f" (take {cycle})"
        out.append((bases[k], bases[k] + suffix))
    return out


def judge_records(
    pool: dict[str, list[str]], pairs: int, seed: int = 0, candidates: int = JUDGE_CANDIDATES
) -> list[dict]:
    """Enough prompts of `candidates` candidates for `pairs` pairs: a prompt's own responses first, topped up from
    others'."""
    rng = random.Random(seed)
    every = [r for responses in pool.values() for r in responses]
    bases = sorted(pool, key=lambda p: -len(pool[p]))  # the prompts with responses of their own first
    records = []
    for base, text in prompt_variants(bases, math.ceil(pairs / math.comb(candidates, 2))):
        own = list(pool[base][:candidates])
        while len(own) < candidates:
            pick = rng.choice(every)
            if pick not in own:
                own.append(pick)
        records.append({"prompt": text, "responses": own})
    return records


def fresh_store(path: Path, lines: list[dict]):
    """A new SQLite store at `path` holding `lines` imported as `preflab import prompts` does."""
    from preflab.db.engine import open_database, session_factory
    from preflab.db.ingest.jsonl import import_file, import_prompts_batch

    source = path.with_suffix(".jsonl")
    source.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    sessions = session_factory(open_database(f"sqlite:///{path}"))
    import_file(sessions, source, import_prompts_batch)
    return sessions
