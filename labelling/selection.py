"""Choosing the prompts and candidates that generation and the judges work on."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import or_, select
from sqlalchemy.orm import Session, sessionmaker

from preflab.db.conversation import Messages, prompt_columns, stored_prompt, stored_reply, user_turn
from preflab.db.export.dataset import SPLITS
from preflab.db.models import Candidate, Prompt, Ranking, RawRecord
from preflab.db.store import IN_CHUNK, chunks
from preflab.errors import ConfigError, InputError


def prompts_from_file(sessions: sessionmaker[Session], path: str | Path) -> list[int]:
    """Import a JSON Lines prompts file (as `preflab import prompts` does) and return its prompt ids.

    Lines that cannot be used are quarantined with the reason, as on import; a
    file with no usable prompt is an error. The import is checkpointed a batch
    per transaction, as `preflab import` is.
    """
    from preflab.db.ingest.jsonl import import_file, import_prompts_batch, open_jsonl, parse_prompt
    from preflab.errors import Invalid

    import_file(sessions, path, import_prompts_batch)
    hashes: list[str] = []
    with open_jsonl(path) as handle:
        for line in handle:
            if line.strip():
                try:
                    hashes.append(parse_prompt(line).prompt_hash)
                except Invalid:
                    continue
    if not hashes:
        raise InputError(f"{path} holds no usable prompt (see `preflab quarantine list`)")
    with sessions.begin() as session:
        ids = {}
        for part in chunks(list(dict.fromkeys(hashes))):
            ids.update(
                (h, pid)
                for h, pid in session.execute(
                    select(Prompt.content_hash, Prompt.id).where(Prompt.content_hash.in_(part))
                )
            )
    return [ids[h] for h in dict.fromkeys(hashes)]


@dataclass
class PromptCandidates:
    """One prompt and the candidates a judge ranks for it (id order).

    `prompt` and `texts` are the stored `text` columns (a conversation's last user
    turn; a reply of several turns as its transcript); `messages` and `replies` the
    stored `messages` columns, None in the plain one-message case. Models read the
    whole exchange through `history` and `reply(i)`.
    """

    prompt_id: int
    prompt: str
    reference: str | None
    candidate_ids: list[int]
    texts: list[str]
    messages: Messages | None = None
    replies: list[Messages | None] = field(default_factory=list)

    @classmethod
    def of(
        cls, prompt_id: int, prompt: str | Messages, reference: str | None, candidate_ids: list[int], texts: list[str]
    ) -> PromptCandidates:
        """From a prompt as the model code holds it (`compact`: a string, or messages) and one-message replies."""
        columns = prompt_columns(user_turn(prompt) if isinstance(prompt, str) else prompt)
        return cls(prompt_id, columns["text"], reference, candidate_ids, texts, columns["messages"])

    @property
    def history(self) -> Messages:
        """The prompt as messages: the system prompt and earlier turns, ending with the user's."""
        return stored_prompt(self.prompt, self.messages)

    def reply(self, index: int) -> Messages:
        """Candidate `index` as messages: one assistant turn, or the turns of a longer continuation."""
        return stored_reply(self.texts[index], self.replies[index] if index < len(self.replies) else None)


def prompts_with_candidates(
    session: Session,
    prompt_ids: list[int] | None = None,
    candidate_model: str | None = None,
    min_candidates: int = 2,
    require_reference: bool = False,
) -> list[PromptCandidates]:
    """Every prompt (or those given) with at least `min_candidates` candidates, in id order.

    `candidate_model` keeps only the candidates that model generated (the
    self-rewarding loop judges the current model's samples only).
    """
    query = (
        select(
            Prompt.id, Prompt.text, Prompt.reference, Candidate.id, Candidate.text, Prompt.messages, Candidate.messages
        )
        .join(Candidate, Candidate.prompt_id == Prompt.id)
        .order_by(Prompt.id, Candidate.id)
    )
    if candidate_model is not None:
        query = query.where(Candidate.model == candidate_model)
    if require_reference:
        query = query.where(Prompt.reference.is_not(None))
    wanted = None if prompt_ids is None else set(prompt_ids)
    if wanted is not None and len(wanted) <= IN_CHUNK:
        query, wanted = query.where(Prompt.id.in_(sorted(wanted))), None
    out: dict[int, PromptCandidates] = {}
    for pid, ptext, reference, cid, ctext, pmessages, cmessages in session.execute(query):
        if wanted is not None and pid not in wanted:
            continue
        item = out.setdefault(pid, PromptCandidates(pid, ptext, reference, [], [], pmessages))
        item.candidate_ids.append(cid)
        item.texts.append(ctext)
        item.replies.append(cmessages)
    return [item for item in out.values() if len(item.candidate_ids) >= min_candidates]


@dataclass
class PromptSelection:
    """Which stored prompts a job works on: by id, by dataset split, by source, by shard, and at most how many."""

    limit: int | None = field(
        default=None,
        metadata={
            "help": "At most this many prompts that still need candidates (a re-run goes on with the next ones); "
            "with --shard, this many of the shard's."
        },
    )
    prompt_id: str | tuple[str, ...] | None = field(
        default=None,
        metadata={
            "help": "Only these prompts: ids, comma-separated or the option repeated"
            " (3,7 or --prompt-id 3 --prompt-id 7).",
            "multiple": True,
        },
    )
    split: str | None = field(
        default=None,
        metadata={"help": "Only the prompts of this split, as the last export assigned them.", "choices": SPLITS},
    )
    source: str | None = field(
        default=None,
        metadata={
            "help": "Only the prompts of this source: the `source` their records gave (e.g. chat), or the import "
            "whose rankings they have (import:arena, import:rankings)."
        },
    )
    shard: str | None = field(
        default=None,
        metadata={
            "metavar": "K/N",
            "help": "Only slice K of N, K counted from 0 (0/8 … 7/8: $SLURM_ARRAY_TASK_ID/8, "
            "$JOB_COMPLETION_INDEX/8); a prompt's slice is fixed by its content hash, so N workers on one "
            "store do every prompt once.",
        },
    )

    def __post_init__(self) -> None:
        if isinstance(self.prompt_id, (tuple, list)):  # --prompt-id given several times
            self.prompt_id = ",".join(map(str, self.prompt_id)) or None
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"--limit must be at least 1, got {self.limit}")
        if self.split is not None and self.split not in SPLITS:
            raise ConfigError(f"--split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        if self.prompt_id is not None:
            parts = [p.strip() for p in str(self.prompt_id).split(",") if p.strip()]
            if not parts or not all(p.isdigit() for p in parts):
                raise ConfigError(f"--prompt-id takes prompt ids separated by commas, got {self.prompt_id!r}")
        if self.shard is not None:
            parse_shard(self.shard)  # now, so a bad value fails before any work

    @property
    def prompt_ids(self) -> list[int]:
        return [int(p) for p in str(self.prompt_id or "").split(",") if p.strip()]

    @property
    def shard_slice(self) -> tuple[int, int] | None:
        """(K, N) of `--shard K/N`; None without --shard."""
        return None if self.shard is None else parse_shard(self.shard)


def parse_shard(value: str) -> tuple[int, int]:
    """(K, N) from "K/N", K from 0 to N-1 as Slurm array task ids and Kubernetes completion indexes count."""
    k, slash, n = str(value).strip().partition("/")
    if not (slash and k.isdigit() and n.isdigit() and int(k) < int(n)):
        raise ConfigError(f"--shard takes K/N, slice K of N counted from 0 (0/8 to 7/8), got {value!r}")
    return int(k), int(n)


def shard_of(prompt_hash: str, n: int) -> int:
    """The slice (0 to n-1) a prompt falls in: its content hash's first 64 bits modulo n.

    The content hash is the prompt's identity wherever it is stored, so every worker,
    machine and database puts a prompt in the same slice.
    """
    return int(prompt_hash[:16], 16) % n


def selected_prompt_ids(
    session: Session, selection: PromptSelection, among: list[int] | None = None
) -> list[int] | None:
    """The ids of the prompts `selection` names (in `among`'s order when given); None: every prompt.

    The limit is not applied here: it counts prompts that still need work, which only the job knows
    (so with a shard, it counts within the shard). A shard may hold none of the prompts: [] then.

    Raises:
        InputError: a prompt id that is not stored, or a selection that names no prompt.
    """
    if selection.prompt_ids:
        wanted = list(dict.fromkeys(selection.prompt_ids))
        found = set()
        for part in chunks(wanted):
            found.update(session.scalars(select(Prompt.id).where(Prompt.id.in_(part))))
        missing = [pid for pid in wanted if pid not in found]
        if missing:
            raise InputError(f"no stored prompt has id {', '.join(map(str, missing))} (see `preflab stats`)")
        among = wanted if among is None else [pid for pid in among if pid in found]
    if selection.split is not None:
        in_split = set(session.scalars(select(Prompt.id).where(Prompt.split == selection.split)))
        if not in_split:
            raise InputError(
                f"no stored prompt is in the {selection.split} split; a prompt gets its split "
                "when a dataset is exported (`preflab export`)"
            )
        among = sorted(in_split) if among is None else [pid for pid in among if pid in in_split]
    if selection.source is not None:
        # A prompt keeps the source of the import that stored it first: its rankings' raw records say the rest.
        ranked = (
            select(Ranking.prompt_id)
            .join(RawRecord, RawRecord.id == Ranking.raw_record_id)
            .where(RawRecord.source == selection.source)
        )
        of_source = set(
            session.scalars(select(Prompt.id).where(or_(Prompt.source == selection.source, Prompt.id.in_(ranked))))
        )
        if not of_source:
            raise InputError(
                f"no stored prompt comes from source {selection.source!r}; "
                f"the stored sources include {', '.join(_some_sources(session)) or 'none'}"
            )
        among = sorted(of_source) if among is None else [pid for pid in among if pid in of_source]
    if among is not None and not among:
        raise InputError("the selection names no prompt")
    if selection.shard_slice is not None:
        # Last, and never an error when empty: with more workers than prompts, some slices hold none.
        among = _in_shard(session, *selection.shard_slice, among)
    return among


def _in_shard(session: Session, k: int, n: int, among: list[int] | None) -> list[int]:
    """The prompts of `among` (None: every stored prompt) in slice k of n, in `among`'s order (else id order)."""
    query = select(Prompt.id, Prompt.content_hash)
    rows = (
        session.execute(query)
        if among is None
        else (row for part in chunks(among) for row in session.execute(query.where(Prompt.id.in_(part))))
    )
    in_shard = {pid for pid, prompt_hash in rows if shard_of(prompt_hash, n) == k}
    return sorted(in_shard) if among is None else [pid for pid in among if pid in in_shard]


def _some_sources(session: Session, n: int = 8) -> list[str]:
    """A few sources `--source` takes: the imports rankings came from, then the prompts' own."""
    imports = select(RawRecord.source).join(Ranking, Ranking.raw_record_id == RawRecord.id).distinct().limit(n)
    given = select(Prompt.source).where(Prompt.source.is_not(None)).distinct().limit(n)
    found = dict.fromkeys([*session.scalars(imports), *session.scalars(given)])
    return sorted(found)[:n]
