"""
The sans-IO retry engine.

Pure functions of the policy, the call's state, the outcome, the clock reading and an RNG:

- :mod:`.backoff`: backoff windows and uniform draws in them;
- :mod:`.decide`: :func:`~.decide.decide` (retry after a delay drawn from a shifted and
  widened window, or give up) and :func:`~.decide.ends_call`.

No locks, no clock reads, no I/O; it imports nothing of smoothclient but the policy and the
hints model.
"""
