"""A Python client for semif-serve: `Client`, `AsyncClient`, typed results and typed errors.

Rules: this sub-package is the caller's side of the wire. It is built on httpx (the
`client` extra) and imports nothing of the server and never torch, so a fleet caller
installs `semif-serve[client]` without the model stack. Modules: `clients` (the two
clients, I/O only), `retry` (the one retry policy both use), `bodies` (request bodies),
`results` (typed answers), `errors` (typed failures), `ask` (the `semif-serve ask`
command).

    from semif_serve.client import Client
    with Client("http://127.0.0.1:8000") as client:          # token from SEMIF_API_TOKEN
        result = client.decide({"ticket": "printer on fire"}, "Is this urgent?",
                               {"yes": "Yes", "no": "No"}, orderings="rotations")
"""

from .bodies import Question
from .clients import AsyncClient, Client
from .errors import ApiError, DeadlineExceeded, MissingToken, SemifError, TransportError
from .results import Averaged, Calibrated, Combined, Decided, Health, Result, Shared, Timing
from .retry import RetryPolicy

__all__ = [
    "ApiError",
    "AsyncClient",
    "Averaged",
    "Calibrated",
    "Client",
    "Combined",
    "DeadlineExceeded",
    "Decided",
    "Health",
    "MissingToken",
    "Question",
    "Result",
    "RetryPolicy",
    "SemifError",
    "Shared",
    "Timing",
    "TransportError",
]
