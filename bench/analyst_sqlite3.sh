#!/bin/bash
# Usage: bench/analyst_sqlite3.sh DB. The issue-20 queries, written plainly, on the 10M-event database with the system
# sqlite3 and its defaults (-readonly, no PRAGMA): one warm-up run, then 5 timed runs
# in one shell (.timer on), median of the 5.
DB=${1:-big.db}
KEY=$(sqlite3 -readonly $DB "SELECT lower(hex(key)) FROM spoolite_event WHERE rowid = (SELECT max(rowid)/2 FROM spoolite_event)")
FLIGHT=$(sqlite3 -readonly $DB "SELECT flight_id FROM spoolite_flight WHERE ref = (SELECT max(ref)/2 FROM spoolite_flight)")
MONTH=2026-06
declare -a Q=(
"SELECT count(*) FROM duty_event"
"SELECT count(*) FROM duty_event_all"
"SELECT event_kind, count(*) FROM duty_event GROUP BY event_kind"
"SELECT event_kind AS value, count(*) AS count FROM (SELECT * FROM duty_event) WHERE event_kind IS NOT NULL GROUP BY event_kind ORDER BY count DESC, value LIMIT 31"
"SELECT substr(instant_utc, 1, 10) AS day, count(*) FROM duty_event WHERE event_kind = 'landing' AND instant_utc >= '$MONTH-01' AND instant_utc < '2026-07-01' GROUP BY day"
"SELECT * FROM duty_event WHERE event_kind = 'landing' AND instant_utc >= '$MONTH-01' ORDER BY instant_utc LIMIT 101"
"SELECT json_extract(d.payload, '\$.tail') AS tail, round(sum(f.block_minutes) / 60, 1) AS block_hours FROM duty_event AS d JOIN flight_times AS f ON f.flight_id = d.flight_id AND f.off_blocks_utc = d.instant_utc WHERE d.event_kind = 'off_blocks' AND d.instant_utc >= '$MONTH-01' AND d.instant_utc < '2026-07-01' GROUP BY tail ORDER BY block_hours DESC"
"SELECT json_extract(d.payload, '\$.tail') AS tail, round(sum(f.block_minutes) / 60, 1) AS block_hours FROM flight_times AS f JOIN duty_event AS d ON d.flight_id = f.flight_id AND d.event_kind = 'off_blocks' AND d.instant_utc = f.off_blocks_utc WHERE f.off_blocks_utc >= '$MONTH-01' AND f.off_blocks_utc < '2026-07-01' GROUP BY tail"
"SELECT * FROM duty_event ORDER BY updated_at DESC LIMIT 101"
"SELECT * FROM duty_event_all ORDER BY change_seq DESC LIMIT 101"
"SELECT * FROM duty_event WHERE flight_id = '$FLIGHT' ORDER BY instant_utc"
"SELECT * FROM duty_event WHERE idempotency_key = '$KEY'"
"SELECT flight_id, off_blocks_utc, on_blocks_utc, round(block_minutes / 60, 2) FROM crew_flight WHERE crew_id = 'C52021' AND role = 'operating' AND off_blocks_utc >= '2026-01-01' AND off_blocks_utc < '2027-01-01' ORDER BY off_blocks_utc"
)
for q in "${Q[@]}"; do
  { echo ".timer on"; echo ".output /dev/null"; for i in 1 2 3 4 5 6; do echo "$q;"; done; } | sqlite3 -readonly $DB 2>&1 | grep "Run Time" | tail -5 | awk '{print $4}' | sort -n | sed -n 3p | tr '\n' ' '
  echo " | $(sqlite3 -readonly $DB "EXPLAIN QUERY PLAN $q" | tail -n +2 | sed 's/^[|` -]*//' | paste -sd ';') | $q"
done
