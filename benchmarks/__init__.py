"""Benchmarks, run by hand (``python -m benchmarks``); never part of the tests."""
