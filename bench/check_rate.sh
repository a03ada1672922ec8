#!/bin/bash
# A daemon's ingest rate into the 10M-row database, alone and while `spoolite check` runs.
set -euo pipefail
B=$(realpath ${B:-target/release})
W=${W:-target/checkbench}   # holds big.db, the 10M-row database
N=${FILES:-40}; E=${EVENTS:-25000}
# CHECK_ARGS: options of the check run meanwhile, e.g. "--quick --jobs 1".
CHECK=${CHECK_ARGS:-}
# BASE: the first offset of the generated events; another for each run on one database.
BASE=${BASE:-20000000}
mkdir -p $W; cd $W
rm -rf sp stage; mkdir -p stage/plain stage/during
for run in plain during; do
  [ $run = plain ] && base=$BASE || base=$((BASE + 10000000))
  for i in $(seq 0 $((N-1))); do
    $B/spoolite-bench __generate --offset $((base + i*E)) --count $E stage/$run/f$i.ndjson >/dev/null
  done
done
$B/spoolite run --spool sp --db big.db --settle 100ms --rescan 30s 2>daemon.log &
DPID=$!
for i in $(seq 100); do [ -d sp/incoming ] && break; sleep 0.1; done
sleep 1
measure() {
  local run=$1
  local before=$(ls sp/archive | wc -l)
  local t0=$(date +%s.%N)
  mv stage/$run/* sp/incoming/
  while [ $(ls sp/archive | wc -l) -lt $((before + N)) ]; do sleep 0.05; done
  local t1=$(date +%s.%N)
  echo "$run: $N files x $E events in $(echo "$t1 - $t0" | bc) s = $(echo "$N * $E / ($t1 - $t0)" | bc) events/s"
}
measure plain
( while :; do s=$(date +%s.%N); $B/spoolite check $CHECK --db big.db >check-during.txt 2>&1 || true; echo "check took $(echo "$(date +%s.%N) - $s" | bc) s" >>checks.txt; done ) &
CPID=$!
sleep 2
measure during
kill $CPID; wait $CPID 2>/dev/null || true

kill $DPID; wait $DPID || true
cat checks.txt; cat check-during.txt
