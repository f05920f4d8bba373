"""Tests of the HTTP cache (a package: the tests share conftest.py helpers)."""
