#!/usr/bin/env python3
"""A downstream job that follows spoolite's change feed exactly once.

It reads `spoolite changes --since N` and keeps, in a SQLite database of its own,
the live events it has seen (`live_event`), the block minutes of every flight
computed from them (the `block_minutes` view), a ledger of every change it has
handled (`handled`) and its checkpoint N (`checkpoint`). The effects of a group of
changes and the checkpoint that covers them are written in ONE transaction: a job
killed at any moment has either handled a change and moved past it, or done
neither, so a restart goes on from N and handles every change exactly once (the
transactional-outbox pattern).

    follow_changes.py --db /var/lib/spoolite/spoolite.db --state ~/block_minutes.db
    follow_changes.py --db ... --state ... --follow     # keep going until SIGTERM

Only the Python standard library is used. The job only reads spoolite's database
(through `spoolite changes`), so an analyst account can run it.
"""

import argparse
import json
import os
import sqlite3
import subprocess
import sys

STATE_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoint (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    change_seq INTEGER NOT NULL
);
INSERT OR IGNORE INTO checkpoint (id, change_seq) VALUES (1, 0);
-- One row per change handled: a change handled twice would break the key.
CREATE TABLE IF NOT EXISTS handled (
    change_seq      INTEGER PRIMARY KEY,
    idempotency_key TEXT NOT NULL,
    retracted       INTEGER NOT NULL
);
-- The live (not retracted) events, as of the checkpoint.
CREATE TABLE IF NOT EXISTS live_event (
    idempotency_key TEXT PRIMARY KEY,
    flight_id       TEXT NOT NULL,
    event_kind      TEXT NOT NULL,
    instant_utc     TEXT NOT NULL,
    source_revision INTEGER NOT NULL
);
-- Block minutes per flight: first off-blocks to last on-blocks, ordered by time
-- (rtrim(..., 'Z') sorts instants correctly), as spoolite's flight_times has them.
CREATE VIEW IF NOT EXISTS block_minutes AS
SELECT flight_id,
       round((julianday(max(CASE WHEN event_kind = 'on_blocks' THEN rtrim(instant_utc, 'Z') END))
            - julianday(min(CASE WHEN event_kind = 'off_blocks' THEN rtrim(instant_utc, 'Z') END)))
             * 1440, 2) AS block_minutes
FROM live_event
WHERE event_kind IN ('off_blocks', 'on_blocks')
GROUP BY flight_id;
"""


def open_state(path):
    # Autocommit mode: the transactions below are opened and closed explicitly.
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(STATE_SCHEMA)
    return conn


def checkpoint(conn):
    return conn.execute("SELECT change_seq FROM checkpoint WHERE id = 1").fetchone()[0]


def apply(conn, change):
    """The job's effect of one change: keep live_event in step with the feed."""
    conn.execute(
        "INSERT INTO handled (change_seq, idempotency_key, retracted) VALUES (?, ?, ?)",
        (change["change_seq"], change["idempotency_key"], int(change["retracted"])),
    )
    if change["retracted"]:
        conn.execute("DELETE FROM live_event WHERE idempotency_key = ?", (change["idempotency_key"],))
    else:
        conn.execute(
            "INSERT INTO live_event (idempotency_key, flight_id, event_kind, instant_utc, source_revision)"
            " VALUES (:idempotency_key, :flight_id, :event_kind, :instant_utc, :source_revision)"
            " ON CONFLICT (idempotency_key) DO UPDATE SET flight_id = excluded.flight_id,"
            " event_kind = excluded.event_kind, instant_utc = excluded.instant_utc,"
            " source_revision = excluded.source_revision",
            change,
        )


def handle(conn, changes):
    """Applies `changes` and moves the checkpoint past them, in one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        since = checkpoint(conn)
        for change in changes:
            if change["change_seq"] <= since:
                raise RuntimeError(f"change {change['change_seq']} is not after {since}")
            apply(conn, change)  # the job's effect: here, keep live_event in step
            since = change["change_seq"]
        conn.execute("UPDATE checkpoint SET change_seq = ? WHERE id = 1", (since,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def follow(spoolite, db, state, keep_following):
    conn = open_state(state)
    command = [spoolite, "changes", "--db", db, "--since", str(checkpoint(conn))]
    if keep_following:
        command.append("--follow")
    with subprocess.Popen(command, stdout=subprocess.PIPE) as feed:
        # spoolite flushes after each group of lines: each read is handled (and
        # committed with its checkpoint) as one group; a cut last line waits for
        # the rest of it.
        pending = b""
        while True:
            chunk = os.read(feed.stdout.fileno(), 1 << 16)
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            if lines:
                handle(conn, [json.loads(line) for line in lines])
        code = feed.wait()
    if code != 0:
        sys.exit(f"spoolite changes exited {code}")
    if pending:
        sys.exit("spoolite changes ended in the middle of a line")
    return checkpoint(conn)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="spoolite's database (only read)")
    parser.add_argument("--state", required=True, help="this job's own SQLite database")
    parser.add_argument("--spoolite", default="spoolite", help="the spoolite binary")
    parser.add_argument("--follow", action="store_true", help="keep following until SIGTERM")
    args = parser.parse_args()
    print(f"checkpoint {follow(args.spoolite, args.db, args.state, args.follow)}")


if __name__ == "__main__":
    main()
