"""Fixtures of this directory's tests."""

from tests.integration.limiter_support import limiters, shared_limiters, sqlite_store  # noqa: F401
from tests.integration.test_fleet_support import fleet  # noqa: F401  (the fixture)
