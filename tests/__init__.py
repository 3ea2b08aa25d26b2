"""The plugin's own tests.

numpy is imported here, before any in-process ``pytester`` run: pytester removes the modules an
inner session imported when it ends, and numpy cannot be imported a second time in one process.
The plugin itself no longer imports numpy for a session that compares nothing, so an inner suite
may be the first to load it.
"""

import numpy  # noqa: F401
