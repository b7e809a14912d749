"""The suite; importing it clears the caller's settings from the environment (tests/hermetic.py)."""

from tests.hermetic import clear

clear()
