"""The model tests' served-model settings (tests/models/conftest.py), for the SDK's tiny and SmolLM2 runs here."""

from tests.models.conftest import tiny_settings  # noqa: F401  (a fixture, found by pytest under its name)
