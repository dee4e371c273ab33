"""One structured line per request: `preflab.server.access`, a JSON object per line.

The line holds the method, the path (never the query string), the status, the time taken,
the body size and the client's address; a refused or failed request adds the reason in
one sentence (`note`), and a stored delivery its raw record id. It never holds a header,
a secret or a byte of the body: annotation text stays out of the log at every level.
"""

from __future__ import annotations

import json
import logging
import time

log = logging.getLogger("preflab.server.access")


def note(scope_or_request, **fields) -> None:
    """Add fields to the access-log line of the request being answered (`note="wrong secret"`, `raw_id=…`)."""
    state = scope_or_request.scope if hasattr(scope_or_request, "scope") else scope_or_request
    state.setdefault("preflab.access", {}).update(fields)


class AccessLog:
    """ASGI middleware writing the line once the response has been sent (or the client went away)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        seen = {"status": 500, "bytes_in": 0}

        async def counting_receive():
            message = await receive()
            if message["type"] == "http.request":
                seen["bytes_in"] += len(message.get("body", b""))
            return message

        async def sending(message):
            if message["type"] == "http.response.start":
                seen["status"] = message["status"]
            await send(message)

        try:
            await self.app(scope, counting_receive, sending)
        finally:
            client = scope.get("client")
            line = {
                "method": scope.get("method"),
                "path": scope.get("path"),
                "status": seen["status"],
                "ms": round((time.perf_counter() - start) * 1000, 1),
                "bytes_in": seen["bytes_in"],
                "client": client[0] if client else None,
                **scope.get("preflab.access", {}),
            }
            level = logging.WARNING if seen["status"] >= 400 and seen["status"] != 404 else logging.INFO
            log.log(level, "%s", json.dumps(line, ensure_ascii=True, default=str))
