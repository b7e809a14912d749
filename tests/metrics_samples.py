"""`/metrics` read as data with prometheus_client's own parser: every sample keyed by its name
and labels, so a test asks for `semif_refusals_total{code="busy"}` by its labels, never by how
the exposition happens to spell them.

Rule 1: parsing only; what a value should be is each test's business.
Rule 2: `value` reads an absent sample as 0 (a counter nothing has moved yet); `sample` insists
that it exists, for a series whose presence is part of what is tested."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from tests.wire_client import request

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(port: int) -> Samples:
    """Every sample of /metrics, asked without a token as a scraper does, keyed by (sample name, labels)."""
    response = await request(port, "GET", "/metrics", headers=[])
    assert (
        response.status == 200 and response.headers[b"content-type"] == CONTENT_TYPE_LATEST.encode()
    )
    samples: Samples = {}
    for family in text_string_to_metric_families(response.body.decode()):
        for found in family.samples:
            samples[(found.name, frozenset(found.labels.items()))] = found.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample's value, 0 when it is not exposed (yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def sample(samples: Samples, name: str, **labels: str) -> float:
    """The sample's value; a KeyError naming it when it is not exposed."""
    return samples[(name, frozenset(labels.items()))]
