"""Sampling from a causal LM: the one sampling config, and batched generation.

`SamplingConfig` holds the fields every sampler shares (how many samples, the
temperature, top-p, the longest reply and the seed) with their checks. Candidate
generation, the score judge, best-of-n sampling and the self-rewarding loop all
extend it, so a field and its check are declared once and every command gets
the same options from it (`preflab.console.config_options`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from preflab.errors import ConfigError


@dataclass
class SamplingConfig:
    """How a model's replies are sampled."""

    n: int = field(default=4, metadata={"help": "Samples per prompt.", "flags": ("-n",)})
    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature."})
    top_p: float = field(default=0.9, metadata={"help": "Nucleus sampling probability mass."})
    max_new_tokens: int = field(default=256, metadata={"help": "Longest reply, in tokens."})
    seed: int = field(default=0, metadata={"help": "Base random seed; each batch derives its own."})

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ConfigError(f"--n must be at least 1, got {self.n}")
        if self.temperature <= 0:
            raise ConfigError(f"--temperature must be positive, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"--top-p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ConfigError(f"--max-new-tokens must be at least 1, got {self.max_new_tokens}")


@dataclass
class Generation:
    text: str
    tokens: int  # generated tokens, the end-of-turn token included
    finished: bool  # ended with an end-of-turn token rather than hitting max_new_tokens
    # log P(its tokens) under the processed (temperature, top-p, top-k) distribution it was sampled from, where the
    # engine knows it (in process, when asked); a server does not say: None.
    logprob: float | None = None


def stop_ids(model, tokenizer) -> set[int]:
    """The token ids that end a reply: the model's end-of-sequence ids and the tokenizer's eos/pad."""
    ids = model.generation_config.eos_token_id
    ids = set(ids if isinstance(ids, list) else [] if ids is None else [ids])
    ids.update(i for i in (tokenizer.eos_token_id, tokenizer.pad_token_id) if i is not None)
    return ids


def generate_texts(
    model,
    tokenizer,
    texts: list[str],
    *,
    max_new_tokens: int,
    do_sample: bool = True,
    temperature: float = 0.7,
    top_p: float = 0.9,
    top_k: int | None = None,
    seed: int = 0,
    logprobs: bool = False,
) -> list[Generation]:
    """Continue already formatted texts in one batched `generate` call (left padding).

    Args:
        top_k: sample from the k likeliest tokens only (0: off); None: the model's generation config says.
        logprobs: give each sample its log-probability under the processed distribution it was drawn from
            (the log-softmax of the scores after temperature, top-p and top-k), as best-of-n's KL needs.
    """
    import torch

    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    sampling = (
        {"do_sample": True, "temperature": temperature, "top_p": top_p, **({} if top_k is None else {"top_k": top_k})}
        if do_sample
        else {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
    )
    if logprobs:
        sampling.update(output_scores=True, return_dict_in_generate=True)
    torch.manual_seed(seed)
    with torch.inference_mode():
        out = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id, **sampling)
        steps = (
            model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True).float().cpu().tolist()
            if logprobs
            else None
        )
    sequences = out.sequences if logprobs else out
    stop = stop_ids(model, tokenizer)
    results = []
    for n, row in enumerate(sequences[:, enc["input_ids"].shape[1] :].tolist()):
        end = next((i for i, t in enumerate(row) if t in stop), None)
        kept = row if end is None else row[:end]
        used = len(row) if end is None else end + 1
        # NUL cannot be stored in a Postgres text column; a sampled one carries no meaning.
        text = tokenizer.decode(kept, skip_special_tokens=True).replace("\x00", "").strip()
        logprob = float(sum(steps[n][:used])) if steps is not None else None
        results.append(Generation(text, used, end is not None, logprob))
    return results


def sample_texts(model, tokenizer, texts: list[str], config: SamplingConfig, seed: int) -> list[Generation]:
    """One sampled reply per formatted text, with `config`'s temperature, top-p and length."""
    return generate_texts(
        model,
        tokenizer,
        texts,
        max_new_tokens=config.max_new_tokens,
        temperature=config.temperature,
        top_p=config.top_p,
        seed=seed,
    )
