"""Acceptance checks and load benchmarks for semif-serve (bench-only; never imported by the product)."""
