#!/usr/bin/env bash
# Installs the built .deb on this machine and checks it as an ops engineer would:
# the accounts, the folders with their owners and modes, a reinstall that changes
# nothing, a batch dropped by a member of spoolite-drop going in, an analyst of
# spoolite-read reading it before and after the daemon stops, and a purge that keeps
# the data. Then removes everything it made.
#
# It changes the system (a package, a user, three groups, two folders), so it runs
# only as root and refuses where spoolite is or was installed. Under systemd the
# installed service itself is checked, hardening included; without it (a container)
# the daemon is started by hand as the unit would start it.
#
# Usage: packaging/check-install.sh [PATH.deb]   (default: the newest in target/debian)
set -euo pipefail
cd "$(dirname "$0")/.."

fail() {
    echo "check-install: $*" >&2
    exit 1
}

[ "$(id -u)" -eq 0 ] || fail "run as root: it installs a package and creates accounts"
deb=${1:-$(ls -t target/debian/spoolite_*.deb 2>/dev/null | head -n 1)}
[ -f "$deb" ] || fail "no package: build one with packaging/check-deb.sh"
if dpkg-query -W -f '${Status}' spoolite 2>/dev/null | grep -q installed ||
    getent passwd spoolite >/dev/null || [ -e /var/lib/spoolite ] || [ -e /var/spool/spoolite ]; then
    fail "spoolite is or was installed here; this check runs only on a machine without it"
fi
python=/usr/bin/python3
[ -x "$python" ] || fail "$python is missing: the analyst reads with Python's sqlite3"

started=$SECONDS
under_systemd=false
[ -d /run/systemd/system ] && under_systemd=true
daemon_pid=
cleanup() {
    if [ -n "$daemon_pid" ]; then kill "$daemon_pid" 2>/dev/null || true; fi
    dpkg --purge spoolite >/dev/null 2>&1 || true
    rm -rf /var/lib/spoolite /var/spool/spoolite
    userdel spoolite 2>/dev/null || true
    for group in spoolite spoolite-drop spoolite-read; do
        groupdel "$group" 2>/dev/null || true
    done
}
trap cleanup EXIT

# Polls a condition every 0.1 s for at most 30 s.
wait_for() {
    local what=$1
    shift
    for _ in $(seq 300); do
        if "$@"; then return 0; fi
        sleep 0.1
    done
    fail "timed out waiting for $what"
}

expect_stat() {
    local path=$1 expected=$2 actual
    actual=$(stat -c '%U:%G %a' "$path")
    [ "$actual" = "$expected" ] || fail "$path is $actual, expected $expected"
}

check_layout() {
    getent passwd spoolite | grep -q ':/var/lib/spoolite:/usr/sbin/nologin$' ||
        fail "user spoolite: $(getent passwd spoolite)"
    for group in spoolite spoolite-drop spoolite-read; do
        getent group "$group" >/dev/null || fail "group $group missing"
    done
    expect_stat /var/spool/spoolite "root:root 755"
    expect_stat /var/spool/spoolite/spoolite.lock "spoolite:spoolite 640"
    expect_stat /var/spool/spoolite/.spoolite "spoolite:spoolite 755"
    expect_stat /var/spool/spoolite/incoming "spoolite:spoolite-drop 2770"
    expect_stat /var/spool/spoolite/archive "spoolite:spoolite 750"
    expect_stat /var/spool/spoolite/rejected "spoolite:spoolite 750"
    expect_stat /var/lib/spoolite "spoolite:spoolite-read 2750"
    [ -f /etc/default/spoolite ] || fail "/etc/default/spoolite missing"
    [ -e /etc/systemd/system/multi-user.target.wants/spoolite.service ] ||
        fail "spoolite.service is not enabled"
}

echo "check-install: installing $deb (systemd running: $under_systemd)"
dpkg -i "$deb" >/dev/null
check_layout
echo "check-install: reinstalling over itself (the upgrade path)"
dpkg -i "$deb" >/dev/null
check_layout

start_daemon() {
    if $under_systemd; then
        systemctl restart spoolite
        wait_for "spoolite.service active" systemctl is-active --quiet spoolite
    else
        # As the unit runs it: its user, groups, umask and environment.
        setpriv --reuid spoolite --regid spoolite --groups spoolite-drop -- \
            env SPOOLITE_SPOOL=/var/spool/spoolite SPOOLITE_DB=/var/lib/spoolite/spoolite.db \
            sh -c 'umask 0027; set -a; . /etc/default/spoolite; exec /usr/bin/spoolite run' \
            2>/tmp/spoolite-check-install.log &
        daemon_pid=$!
        wait_for "the database" test -e /var/lib/spoolite/spoolite.db
    fi
}

stop_daemon() {
    if $under_systemd; then
        systemctl stop spoolite
    else
        kill -TERM "$daemon_pid"
        wait "$daemon_pid" || fail "the daemon exited $? on SIGTERM"
        daemon_pid=
    fi
}

# The SFTP account: any uid with the spoolite-drop group and the umask of the
# sshd Match block, writing under a temporary name and renaming.
drop() {
    local name=$1 content=$2
    setpriv --reuid 64100 --regid spoolite-drop --clear-groups -- sh -c \
        "umask 0027; printf '%s' '$content' > /var/spool/spoolite/incoming/$name.part &&
         mv /var/spool/spoolite/incoming/$name.part /var/spool/spoolite/incoming/$name"
}

# The analyst: any uid with the spoolite-read group, reading with mode=ro.
analyst() {
    setpriv --reuid 64101 --regid spoolite-read --clear-groups -- "$python" -c '
import sqlite3, sys
conn = sqlite3.connect("file:/var/lib/spoolite/spoolite.db?mode=ro", uri=True)
print(conn.execute(sys.argv[1]).fetchone()[0])' "$1"
}

event() {
    printf '{"flight_id":"%s","event_kind":"off_blocks","instant_utc":"2026-11-29T10:05:00Z"}' "$1"
}

start_daemon
drop one.json "{\"events\":[$(event CHK1)]}"
wait_for "one.json archived" test -e /var/spool/spoolite/archive/one.json
[ "$(analyst 'SELECT count(*) FROM duty_event')" = 1 ] || fail "the analyst does not see the batch"
for file in /var/lib/spoolite/spoolite.db /var/lib/spoolite/spoolite.db-wal \
    /var/lib/spoolite/spoolite.db-shm; do
    expect_stat "$file" "spoolite:spoolite-read 640"
done
if setpriv --reuid 64101 --regid spoolite-read --clear-groups -- \
    touch /var/lib/spoolite/analyst-was-here 2>/dev/null; then
    fail "an analyst can write /var/lib/spoolite"
fi

stop_daemon
[ "$(analyst 'SELECT count(*) FROM ingest_inbox')" = 1 ] ||
    fail "the analyst cannot read while the daemon is stopped"
start_daemon
drop two.json "{\"events\":[$(event CHK2)]}"
wait_for "two.json archived" test -e /var/spool/spoolite/archive/two.json
[ "$(analyst 'SELECT count(*) FROM duty_event')" = 2 ] || fail "the analyst misses the second batch"
stop_daemon

echo "check-install: purging"
dpkg --purge spoolite >/dev/null
[ ! -e /usr/bin/spoolite ] || fail "purge left /usr/bin/spoolite"
[ ! -e /etc/default/spoolite ] || fail "purge left /etc/default/spoolite"
[ -e /var/lib/spoolite/spoolite.db ] || fail "purge deleted the database"
[ -e /var/spool/spoolite/archive/one.json ] || fail "purge deleted archived batches"

echo "check-install: ok in $((SECONDS - started)) s"
