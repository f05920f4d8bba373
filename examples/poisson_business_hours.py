"""About 40 actions per day, at random, only between 09:00 and 18:00 in New York."""

from __future__ import annotations

import random
import time as time_module
from datetime import datetime, time
from zoneinfo import ZoneInfo

from smoothclient.spreading import PoissonScheduler, TimeWindow

ny = ZoneInfo("America/New_York")
hours = TimeWindow(time(9), time(18), tz=ny)
scheduler = PoissonScheduler(
    lambda: print("ping"), events_per_day=40, window=hours, rng=random.Random(7)
)
t = datetime(2026, 11, 23, 7, 30, tzinfo=ny).timestamp()
for _ in range(8):
    t = scheduler.next_event(t)
    print("next event", datetime.fromtimestamp(t, ny).strftime("%a %H:%M:%S"))
    assert hours.contains(datetime.fromtimestamp(t, ny))
# A real run: scheduler.start() in a thread (or await scheduler.run_async()), then stop().
fast = PoissonScheduler(lambda: None, rate=500.0)
fast.start()
while fast.stats.events < 20:
    time_module.sleep(0.01)
fast.stop()
print("ran", fast.stats.events, "events at ~500/s, last gap", round(fast.stats.last_gap, 4), "s")
