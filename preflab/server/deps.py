"""What the endpoints depend on, through FastAPI's `Depends`: the services `create_app` keeps in `app.state`
(the serve settings, the store's sessions, Label Studio, the receiver and the workers) and the secret each kind
of caller shows (checked by `security.py`), so a refused request is refused before its endpoint runs.

Every one is `async`: it runs on the event loop, as the checks written inside the endpoints did, not in a thread."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session, sessionmaker

from preflab.server.config import SECRET_HEADER, ServeConfig
from preflab.server.receiver import Receiver
from preflab.server.retraining import ModelWorker
from preflab.server.security import check_basic, check_header
from preflab.server.services import Services
from preflab.server.studio import Studio
from preflab.server.workers import DeliveryWorker


async def get_services(request: Request) -> Services:
    return request.app.state.services


ServicesDep = Annotated[Services, Depends(get_services)]


async def get_config(services: ServicesDep) -> ServeConfig:
    return services.config


async def get_sessions(services: ServicesDep) -> sessionmaker[Session]:
    return services.sessions


async def get_studio(services: ServicesDep) -> Studio:
    return services.studio


async def get_model(services: ServicesDep) -> ModelWorker:
    return services.model


async def get_receiver(services: ServicesDep) -> Receiver:
    return services.receiver


async def get_deliveries(services: ServicesDep) -> DeliveryWorker:
    return services.deliveries


ConfigDep = Annotated[ServeConfig, Depends(get_config)]
SessionsDep = Annotated[sessionmaker[Session], Depends(get_sessions)]
StudioDep = Annotated[Studio, Depends(get_studio)]
ModelDep = Annotated[ModelWorker, Depends(get_model)]
ReceiverDep = Annotated[Receiver, Depends(get_receiver)]
DeliveriesDep = Annotated[DeliveryWorker, Depends(get_deliveries)]


async def require_basic_auth(request: Request, services: ServicesDep) -> None:
    """Label Studio's ML backend connection: the secret as the basic-auth password (missing 401, wrong 403)."""
    check_basic(request.headers.get("authorization"), services.secret)


async def require_secret_header(request: Request, services: ServicesDep) -> None:
    """A webhook: the secret in the `X-Preflab-Secret` header (missing 401, wrong 403)."""
    check_header(request.headers.get(SECRET_HEADER), services.secret)
