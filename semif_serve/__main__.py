"""`python -m semif_serve`: the same entry point as the `semif-serve` script."""

from .cli import main

raise SystemExit(main())
