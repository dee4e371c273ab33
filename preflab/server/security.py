"""Who may call the server, and how much they may send.

One shared secret (`PREFLAB_WEBHOOK_SECRET`): webhooks carry it in the `X-Preflab-Secret`
header, and Label Studio's ML backend connection sends it as the basic-auth password.
It is compared in constant time, and is never logged. Without a secret (loopback only:
`config.check_bind`) every caller is let in.

A body is read a chunk at a time and refused (413) as soon as it passes the limit, so a
20 MB body is never held whole; a declared Content-Length over the limit is refused unread.
"""

from __future__ import annotations

import base64
import binascii
import hmac

from starlette.requests import Request


class Refused(Exception):
    """A request the server answers with `status` and one sentence, before touching the store."""

    def __init__(self, status: int, reason: str, headers: dict[str, str] | None = None):
        super().__init__(reason)
        self.status, self.reason, self.headers = status, reason, headers or {}


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode("utf-8"))


def check_header(value: str | None, expected: str | None) -> None:
    """The webhook's `X-Preflab-Secret` header: missing → 401, wrong → 403."""
    if expected is None:
        return
    if not value:
        raise Refused(401, "no secret (the X-Preflab-Secret header is missing)")
    if not _same(value, expected):
        raise Refused(403, "wrong secret in the X-Preflab-Secret header")


def check_basic(authorization: str | None, expected: str | None) -> None:
    """The basic-auth password Label Studio sends to /setup and /predict: missing → 401, wrong → 403."""
    if expected is None:
        return
    challenge = {"WWW-Authenticate": 'Basic realm="preflab"'}
    scheme, _, encoded = (authorization or "").partition(" ")
    if scheme.lower() != "basic" or not encoded.strip():
        raise Refused(401, "no secret (no basic-auth credentials)", challenge)
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise Refused(401, "no secret (malformed basic-auth credentials)", challenge) from None
    _, sep, password = decoded.partition(":")
    if not sep or not _same(password, expected):
        raise Refused(403, "wrong secret as the basic-auth password")


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 once it passes `limit` bytes (a declared length: before reading)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise Refused(413, f"body of {int(declared):,} bytes is over the {limit:,}-byte limit")
        except ValueError:
            raise Refused(400, "Content-Length is not a number") from None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Refused(413, f"body over the {limit:,}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)
