"""Labelled decisions: how well a served model chooses, and how honest its probabilities are.

`python -m bench evaluate` scores a labelled file through a running server
under each ordering method and reports accuracy, unanimity, position bias and
the calibration metrics; `python -m bench calibrate` fits one temperature per
workload and method on the fit part and reports the held-out part.

Modules, each with one job: `rows` (the labelled format and its split),
`metrics` (NLL, Brier, ECE, reliability bins: the only definitions), `fit`
(the temperature fit), `scoring` (asking the server, keeping per-row
probabilities), `plots` (every matplotlib call), and the two commands
`evaluate` and `calibrate`. Nothing here is imported by the server.
"""
