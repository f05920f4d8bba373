"""
The tools around the library, apart from it.

The ``smoothclient`` command (:mod:`.cli`), the demo, the virtual-time simulator and the
demo's rate-limited server.  Nothing in the library imports them.
"""
