"""Fixtures of this directory's tests."""

from tests.integration.test_fleet_support import fleet  # noqa: F401  (the fixture)
