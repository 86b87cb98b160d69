"""Benchmarks of the gateway's own cost (run ``python -m bench``)."""
