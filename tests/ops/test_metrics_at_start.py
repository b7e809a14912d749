"""A fresh server's /metrics already carries every refusal code, scorer kind and orderings method, at 0.

Prometheus' increase() cannot see a series that first appears at 1: without these
zeros the first `scoring_failed` or out-of-memory refusal after a start would never
fire its alert (deploy/prometheus/semif-serve.rules.yml). On a real socket, parsed
with prometheus_client's own parser.
"""

from __future__ import annotations

from semif_serve.errors import STATUS
from semif_serve.ops.metrics import KINDS
from tests.metrics_samples import sample, scrape


async def test_a_fresh_server_exports_every_refusal_code_and_scorer_kind_at_zero(
    start_server, fake
) -> None:
    server = await start_server(fake)
    samples = await scrape(server.port)
    for code in STATUS:
        assert sample(samples, "semif_refusals_total", code=code) == 0, code
    for kind in KINDS:
        for name in (
            "semif_scorer_call_duration_seconds_count",
            "semif_scorer_queue_seconds_count",
        ):
            assert sample(samples, name, kind=kind) == 0, (name, kind)
    for method in ("none", "rotations", "all", "prior"):
        assert sample(samples, "semif_decisions_total", method=method) == 0, method
    assert fake.calls == []
