"""The test suite, one folder per layer (CONTRIBUTING.md, "Tests").

A package, so that test modules import shared code as ``tests.support`` (and each other,
as ``tests.contracts.test_validation``) without touching ``sys.path``.
"""
