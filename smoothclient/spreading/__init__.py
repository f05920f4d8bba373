"""
Helpers that spread calls in time, for code that is not an HTTP client.

``@retry`` (:mod:`.retry`), ``@jittered`` (:mod:`.jittered`), ``@paced`` (:mod:`.paced`),
:func:`~.spread.spread`, stable offsets (:mod:`.offsets`), Poisson schedules in time-of-day
windows (:mod:`.poisson`) and the scheduler-reconciler (:mod:`.reconciler`).
"""
