"""`/metrics` read as data with prometheus_client's own parser: every sample keyed by its name
and labels, so a test asks for `semif_refusals_total{code="busy"}` by its labels, never by how
the exposition happens to spell them.

Rule 1: parsing only; what a value should be is each test's business.
Rule 2: `value` reads an absent sample as 0 (a counter nothing has moved yet); `sample` insists
that it exists, for a series whose presence is part of what is tested.
Rule 3: labels a test does not name are summed over, as PromQL's `sum without (...)`: a test about
refusals by code reads them over every caller; one about callers names the caller."""

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
    return parse(response.body.decode())


def parse(exposition: str) -> Samples:
    """Every sample of an exposition, keyed by (sample name, labels)."""
    samples: Samples = {}
    for family in text_string_to_metric_families(exposition):
        for found in family.samples:
            samples[(found.name, frozenset(found.labels.items()))] = found.value
    return samples


def _matching(samples: Samples, name: str, labels: dict[str, str]) -> list[float]:
    wanted = frozenset(labels.items())
    return [v for (found, held), v in samples.items() if found == name and wanted <= held]


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples with these labels (and any others), 0 when none is exposed (yet)."""
    return sum(_matching(samples, name, labels))


def sample(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples with these labels (and any others); a KeyError naming it when none is exposed."""
    matching = _matching(samples, name, labels)
    if not matching:
        raise KeyError((name, labels))
    return sum(matching)
