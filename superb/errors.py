"""The base of superb's own exceptions.

One base lets the CLI tell superb's reasons to stop (bad input, a busy experiment) from
a bug. Every subclass keeps its fields through pickling, as the scheduler's and
SimpleTVM's exceptions do.
"""

from __future__ import annotations


class SuperbError(Exception):
    """Base of every exception superb raises on purpose."""
