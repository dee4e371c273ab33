"""The servers behind one `openai` engine (`--api-base A,B,…`): which to ask next, and which stopped answering.

Each ask goes to the server with the fewest in flight (`Routes.pick`). A server that stops answering while
another still answers is left out from then on (`Routes.lose`): what was asked of it is asked of the others,
and the run says so once, as a warning and in `EngineStats.servers_lost`. The last one that stops answering
stops the run, as a single server does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from preflab.lm.engines import wire
from preflab.lm.engines.config import EngineStats

log = logging.getLogger(__name__)


class Route:
    """One server: its URL, its client, the requests in flight to it, and whether it still answers."""

    def __init__(self, url: str, client):
        self.url, self.client, self.in_flight, self.alive = url, client, 0, True

    def create(self, endpoint: str):
        """The client's raw-response `create` for `endpoint` (`wire.CHAT` or `wire.COMPLETIONS`)."""
        resource = self.client.chat.completions if endpoint == wire.CHAT else self.client.completions
        return resource.with_raw_response.create


class Lost(Exception):
    """The server a request went to stopped answering, and another still answers: ask that one."""


class Routes:
    """The engine's servers, in the order `--api-base` gives them."""

    def __init__(self, routes: list[Route], stats: EngineStats):
        self.all, self._stats = routes, stats

    def __iter__(self) -> Iterator[Route]:
        return iter(self.all)

    @property
    def first(self) -> Route:
        """The first server that still answers (probes go to it)."""
        return next(r for r in self.all if r.alive)

    def pick(self) -> Route:
        """The server that still answers with the fewest requests in flight (the first of equals)."""
        return min((r for r in self.all if r.alive), key=lambda r: r.in_flight)

    def lose(self, route: Route, exc: Exception) -> bool:
        """Leave out `route`, which stopped answering, if another server still answers (and say so once).

        Returns:
            False where no other server answers: the run cannot go on.
        """
        others = [r for r in self.all if r.alive and r is not route]
        if not others:
            return False
        if route.alive:
            route.alive = False
            self._stats.servers_lost.append(route.url)
            log.warning(
                "the server at %s stopped answering (%s): going on with %s",
                route.url,
                wire.reason(exc),
                ", ".join(r.url for r in others),
            )
        return True
