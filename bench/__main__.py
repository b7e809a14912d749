"""`python -m bench <check> --url URL` (acceptance checks) or `python -m bench load` / `scale` / `wrk` (benchmarks)."""

import sys

from . import acceptance

if sys.argv[1:2] == ["load"]:
    from . import load

    raise SystemExit(load.main(sys.argv[2:]))
if sys.argv[1:2] == ["scale"]:
    from . import scale

    raise SystemExit(scale.main(sys.argv[2:]))
if sys.argv[1:2] == ["wrk"]:
    from . import wrk

    raise SystemExit(wrk.main(sys.argv[2:]))
raise SystemExit(acceptance.main(sys.argv[1:]))
