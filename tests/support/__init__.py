"""Helpers shared by the tests (not fixtures: those are in the conftest.py files); tests/README.md lists them."""
