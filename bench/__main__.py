"""`python -m bench <check> --url URL` (acceptance checks), `python -m bench load` / `scale` / `wrk` (benchmarks),
or `python -m bench evaluate|calibrate` (labelled data: accuracy, calibration)."""

import sys

from bench.acceptance import acceptance

if sys.argv[1:2] == ["evaluate"]:
    from bench.labelled import evaluate

    raise SystemExit(evaluate.main(sys.argv[2:]))
if sys.argv[1:2] == ["calibrate"]:
    from bench.labelled import calibrate

    raise SystemExit(calibrate.main(sys.argv[2:]))
if sys.argv[1:2] == ["load"]:
    from bench.load import load

    raise SystemExit(load.main(sys.argv[2:]))
if sys.argv[1:2] == ["scale"]:
    from bench.scale import scale

    raise SystemExit(scale.main(sys.argv[2:]))
if sys.argv[1:2] == ["wrk"]:
    from bench.load import wrk

    raise SystemExit(wrk.main(sys.argv[2:]))
raise SystemExit(acceptance.main(sys.argv[1:]))
