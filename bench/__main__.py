"""`python -m bench <check> --url URL` (acceptance checks) or `python -m bench load` (benchmarks)."""

import sys

from . import acceptance

if sys.argv[1:2] == ["load"]:
    from . import load

    raise SystemExit(load.main(sys.argv[2:]))
raise SystemExit(acceptance.main(sys.argv[1:]))
