"""Configuration: every setting read from the environment once, validated at startup.

A bad value is a ValueError naming the variable, so an operator sees which knob is wrong before
the model loads (contract: C1, S1, S8). `settings.py` declares each setting once and reads them;
`parsers.py` judges one variable's text; `semif_compat.py` reads SemIf's server's names (extension).
"""

from .parsers import MIN_TOKEN_LENGTH, TOKEN_RECIPE, TOKEN_RULE, token_problem
from .semif_compat import SEMIF_NAMES, SEMIF_ONLY
from .settings import (
    DEFAULT_ALIASES,
    DEFAULT_MODEL,
    DEFAULT_REVISION,
    Settings,
    declared,
    load,
    variables,
)

__all__ = [
    "DEFAULT_ALIASES",
    "DEFAULT_MODEL",
    "DEFAULT_REVISION",
    "MIN_TOKEN_LENGTH",
    "SEMIF_NAMES",
    "SEMIF_ONLY",
    "TOKEN_RECIPE",
    "TOKEN_RULE",
    "Settings",
    "declared",
    "load",
    "token_problem",
    "variables",
]
