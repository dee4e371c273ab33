"""`POST /webhook`: the webhook receiver. The delivery is stored raw and acknowledged once committed; the
receiver thread stores the deliveries that arrive together in one transaction (group commit, `receiver.py`);
the `deliveries` worker parses them. Label Studio waits one second for the answer, inside the annotator's own
submit, and never sends it again."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from preflab.server.access_log import note
from preflab.server.deps import ConfigDep, DeliveriesDep, ReceiverDep, require_secret_header
from preflab.server.security import Refused, read_body

router = APIRouter(dependencies=[Depends(require_secret_header)])


@router.post("/webhook")
async def webhook(request: Request, config: ConfigDep, receiver: ReceiverDep, deliveries: DeliveriesDep):
    body = await read_body(request, config.max_body)
    client = request.client.host if request.client else None
    delivery = await receiver.receive(body, client)  # committed (else raises: 500)
    note(request, raw_id=delivery.raw_id, new=delivery.new)
    if delivery.error:
        raise Refused(400, f"{delivery.error} (kept in quarantine as raw record {delivery.raw_id})")
    deliveries.loop.wake()
    return {"stored": delivery.raw_id, "new": delivery.new}
