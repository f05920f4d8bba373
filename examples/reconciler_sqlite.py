"""
A paired scheduler-reconciler over a SQLite table of pending rows.

The user-triggered enqueue is the fast path; the reconciler's tick is the insurance: here the
queue is flushed (every enqueued job lost) and the next tick puts each pending row back, once.
"""

from __future__ import annotations

import queue
import sqlite3

from smoothclient.spreading import Reconciler

db = sqlite3.connect(":memory:", check_same_thread=False)
db.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, state TEXT NOT NULL)")
db.execute("CREATE INDEX jobs_state ON jobs (state)")
db.executemany("INSERT INTO jobs (state) VALUES (?)", [("pending",)] * 20)
work: queue.Queue[int] = queue.Queue()


def find_pending() -> list[int]:
    """The authoritative query: everything that should be in flight."""
    return [row[0] for row in db.execute("SELECT id FROM jobs WHERE state = 'pending'")]


def process(job_id: int) -> None:
    """Idempotent work: marking a job done twice is harmless."""
    db.execute("UPDATE jobs SET state = 'done' WHERE id = ?", (job_id,))


reconciler = Reconciler(find_pending, work.put, every=60, jitter=0.1, spread_over=0.5)
print("first tick enqueued", reconciler.tick())
lost = 0
while not work.empty():  # the queue is flushed: every job is lost
    work.get()
    lost += 1
print("lost from the queue", lost)
print("next tick recovered", reconciler.tick())
while not work.empty():
    process(work.get())
remaining = db.execute("SELECT COUNT(*) FROM jobs WHERE state = 'pending'").fetchone()[0]
print("pending after processing", remaining, "| counts", reconciler.counts)
assert remaining == 0
