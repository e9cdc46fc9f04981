"""The core suite's test setup for the projects' tests too.

Imported before any project package, so the environment (simulated CPU devices,
fresh data and compilation caches) is set before JAX starts.
"""

import tests.conftest  # noqa: F401
from tests.conftest import _fresh_builds  # noqa: F401,E402  (autouse: each test builds afresh)
