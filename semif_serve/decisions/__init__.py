"""What a decision asks and the views derived from its scores: pure values and arithmetic, no I/O but the calibration file."""
