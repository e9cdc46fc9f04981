"""The core suite's test setup for the projects' tests too.

Imported before any project package, so the environment (simulated CPU devices,
fresh data and compilation caches) is set before JAX starts.
"""

import tests.conftest  # noqa: F401
