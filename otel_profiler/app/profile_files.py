"""Which files make up a profile folder, as an upload carries it (standard library only: the upload
client needs none of the app's packages)."""

import re

PROFILE_FILE = re.compile(r"(rank-\d+\.(json|\d+\.events)|summary\.json|"
                          r"memory-snapshot\.rank-\d+\.[A-Za-z0-9_-]+\.pickle)")
"""A file of a profile folder: rank metadata and event parts, the summary, memory snapshots."""
