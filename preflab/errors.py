"""Domain errors. Only the CLI turns them into a message and a non-zero exit."""


class PreflabError(Exception):
    """Base class: its message is one sentence a user can act on."""


class ConfigError(PreflabError):
    """A setting is missing or malformed."""


class DatabaseError(PreflabError):
    """The database cannot be reached or is not at the expected schema."""


class InputError(PreflabError):
    """A file or option given by the user cannot be used."""


class NotFound(PreflabError):
    """A named object (model version, dataset version, project) does not exist."""


class LabelStudioError(PreflabError):
    """Label Studio is unreachable, refused the token, or answered unexpectedly."""


class HubError(PreflabError):
    """The Hugging Face Hub is unreachable or refused the request."""


class TrainingError(PreflabError):
    """A training run could not start or failed."""


class LockHeld(PreflabError):
    """Another process holds the lock for this job."""


class EngineError(PreflabError):
    """A model server refused the key, has no such model, does not answer, or cannot do what was asked."""


class JudgeError(PreflabError):
    """A judge could not read its own replies past its budget: it stopped before asking for more."""


class Invalid(ValueError):
    """A record that cannot be imported; the message is the quarantine reason."""


def one_line(exc: BaseException) -> str:
    """An exception as one line for a log, an answer or a stored error: its message with the whitespace
    collapsed and cut at 300 characters, after its class name unless it is a preflab error (already a sentence)."""
    text = " ".join(str(exc).split())[:300]
    if isinstance(exc, PreflabError) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# The exit status of an import that read records but could use none of them (every one
# quarantined): a scheduled import can tell a wrong file from a good one. The summary is
# still printed. A partly bad file exits 0; a file preflab cannot read at all exits 1.
EXIT_ALL_QUARANTINED = 3
