"""Test doubles that are real things: a stand-in model server over real HTTP."""

from tests.fakes.model_server import (
    Call,
    Drop,
    Hang,
    HttpError,
    ModelServer,
    Raw,
    RecordedRequest,
    Reply,
    Trickle,
)

__all__ = ["Call", "Drop", "Hang", "HttpError", "ModelServer", "Raw", "RecordedRequest", "Reply",
           "Trickle"]
