"""Benchmarks (run with ``make bench``); not part of the installed package."""
