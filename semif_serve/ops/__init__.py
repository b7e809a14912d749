"""Operating the server in a fleet: metrics, request ids, access logs, Retry-After.

Rules: these modules observe requests and scorer calls; they never decide what a
request gets (that is service/ and the wire), except the answer of the /metrics
route, `Operations.metrics_reply`, which the server hands the service for that route;
and they never hold an error code of their own (errors.py
has the one table). They read the application through callables (the admitted
count, the scorer's facts, and with SEMIF_MAX_WAIT_S the busy refusals by reason), never
the Service itself. Only `metrics.py` imports
prometheus_client, and only when metrics are on, so the server runs without it.
Nothing here may log or expose a header value other than the request id, a
token, or a body.

Theory of operation: the wire opens an `Exchange` for each request
(`operations.Operations.begin`), asks for the headers every response carries
(`X-Request-Id`, `x-typesafe-request-id` where the SDK reads it, and `Retry-After`
on 503 and on a 429 that brings none: a wait-budget 429 carries its own estimate), and closes
the exchange once the response is written; closing writes the access log line and moves the metrics.
The engine reports each scorer call's timing to `Operations.scorer_call`, which
feeds the scorer histograms and the Retry-After estimate.
"""
