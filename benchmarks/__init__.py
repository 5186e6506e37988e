"""Benchmarks of lse_energy against outside peers (run: ``python benchmarks/run.py`` or ``nox -s bench``)."""
