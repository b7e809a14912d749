"""Extension: TypeSafe's System One decision API (`POST /v1/systemone`, `GET /v1/models`).

Rule 1: pure functions over plain data. `translate` turns a request body into the
same SemIf rows SemIf's own server builds (docs/JEV_API_COMPAT.md section 4);
`assemble` turns the views the service already built (native, calibrated or
order-averaged) into the API's answers; `catalogue` lists the model names.
Rule 2: nothing here does I/O, touches the engine, parses HTTP or renders an
error envelope: refusals are errors.ApiError values with a `param`, and the
service routes, scores and renders exactly as for /decide and /decide/shared.
"""
