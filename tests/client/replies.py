"""Replies the client tests play back through an httpx MockTransport: one /decide result with
every field the contract names.

Rule: data only; the transports and what a client makes of a reply live in the tests.
"""

OK = {
    "id": "d",
    "option_ids": ["a", "b"],
    "probabilities": [0.25, 0.75],
    "option_logits": [0.0, 1.0986],
    "input_tokens": 12,
    "prompt_sha256": "0" * 64,
    "prompt_version": "v",
    "model": {"source": "m"},
    "readout": "r",
    "probability_status": "s",
}
