#!/usr/bin/env bash
# Builds the Debian package with cargo-deb and checks what it holds: the spoolite
# binary and no other, the unit and the environment file exactly as in packaging/
# (the latter as a conffile), the docs and the schema, and the maintainer scripts
# with cargo-deb's systemd parts; then verifies the packaged unit, pointed at the
# packaged binary, with systemd-analyze.
#
# Usage: packaging/check-deb.sh [cargo deb options, e.g. --no-build]
# Needs: cargo-deb (cargo install cargo-deb --locked), dpkg-deb, systemd-analyze.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() {
    echo "check-deb: $*" >&2
    exit 1
}

command -v cargo-deb >/dev/null || fail "cargo-deb is missing: cargo install cargo-deb --locked"
command -v dpkg-deb >/dev/null || fail "dpkg-deb is missing: apt-get install dpkg"
command -v systemd-analyze >/dev/null || fail "systemd-analyze is missing: apt-get install systemd"

started=$SECONDS
deb=$(cargo deb "$@" | tail -n 1)
[ -f "$deb" ] || fail "cargo deb printed no package path (got: $deb)"
echo "check-deb: built $deb in $((SECONDS - started)) s"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dpkg-deb -x "$deb" "$work/root"
dpkg-deb -e "$deb" "$work/control"
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's#^\./#/#' >"$work/contents"

has() {
    grep -qxF "$1" "$work/contents" || fail "the package lacks $1"
}

# The unit: /usr/lib/systemd/system on current cargo-deb, /lib/systemd/system on
# older releases; both are where systemd looks.
unit=$(grep -xE '(/usr)?/lib/systemd/system/spoolite\.service' "$work/contents") ||
    fail "the package lacks spoolite.service"
cmp -s "$work/root$unit" packaging/spoolite.service ||
    fail "$unit differs from packaging/spoolite.service"

for backup_unit in spoolite-backup.service spoolite-backup.timer; do
    has "/usr/lib/systemd/system/$backup_unit"
    cmp -s "$work/root/usr/lib/systemd/system/$backup_unit" "packaging/$backup_unit" ||
        fail "$backup_unit differs from packaging/$backup_unit"
done

has /usr/bin/spoolite
binaries=$(grep -c '^/usr/bin/.' "$work/contents")
[ "$binaries" -eq 1 ] || fail "/usr/bin holds $binaries files; only spoolite belongs there"
[ -x "$work/root/usr/bin/spoolite" ] || fail "/usr/bin/spoolite is not executable"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
[ "$("$work/root/usr/bin/spoolite" --version)" = "spoolite $version" ] ||
    fail "the packaged binary is not spoolite $version"

has /etc/default/spoolite
cmp -s "$work/root/etc/default/spoolite" packaging/spoolite.env ||
    fail "/etc/default/spoolite differs from packaging/spoolite.env"
grep -qxF /etc/default/spoolite "$work/control/conffiles" ||
    fail "/etc/default/spoolite is not a conffile (upgrades would overwrite site settings)"

doc=/usr/share/doc/spoolite
# The documents as laid out in the repository, so that their links hold.
for source in README.md ARCHITECTURE.md BENCHMARKS.md docs/*.md docs/bench-history/*.md \
    packaging/README.md; do
    installed=$doc/$source
    has "$installed"
    cmp -s "$work/root$installed" "$source" || fail "$installed differs from $source"
done
for source in serve metadata.yml; do
    installed=/usr/share/spoolite/datasette/$source
    has "$installed"
    cmp -s "$work/root$installed" "packaging/datasette/$source" ||
        fail "$installed differs from packaging/datasette/$source"
done
[ -x "$work/root/usr/share/spoolite/datasette/serve" ] ||
    fail "/usr/share/spoolite/datasette/serve is not executable"
has "$doc/copyright"
for sql in schema/*.sql; do
    has "$doc/schema/$(basename "$sql")"
done

control=$work/control/control
grep -qx 'Package: spoolite' "$control" || fail "control: not Package: spoolite"
grep -q '^Depends:.*libc6' "$control" || fail "control: Depends lacks libc6 (\$auto)"
grep -q '^Depends:.*passwd' "$control" || fail "control: Depends lacks passwd (postinst's useradd)"
grep -q '^Description: [A-Z]' "$control" || fail "control: no Description summary"

for script in postinst prerm postrm; do
    [ -x "$work/control/$script" ] || fail "maintainer script $script missing or not executable"
    sh -n "$work/control/$script" || fail "$script: syntax error"
    ! grep -q '#DEBHELPER#' "$work/control/$script" ||
        fail "$script: #DEBHELPER# was not replaced by cargo-deb's systemd parts"
done
grep -q 'groupadd --system spoolite-read' "$work/control/postinst" || fail "postinst: not ours"
grep -q 'deb-systemd-helper enable spoolite.service' "$work/control/postinst" ||
    fail "postinst: does not enable spoolite.service"
grep -q 'deb-systemd-invoke $_dh_action spoolite.service' "$work/control/postinst" ||
    fail "postinst: does not start or restart spoolite.service"
grep -q 'deb-systemd-invoke stop spoolite.service' "$work/control/prerm" ||
    fail "prerm: does not stop spoolite.service"
grep -q 'deb-systemd-helper purge spoolite.service' "$work/control/postrm" ||
    fail "postrm: does not forget spoolite.service on purge"

# systemd-analyze verify wants ExecStart's binary to exist: point a copy of the
# packaged unit at the packaged binary.
sed "s#^ExecStart=/usr/bin/spoolite #ExecStart=$work/root/usr/bin/spoolite #" \
    "$work/root$unit" >"$work/spoolite.service"
verify=$(systemd-analyze verify --man=no "$work/spoolite.service" 2>&1) ||
    fail "systemd-analyze verify failed: $verify"
if grep -q spoolite <<<"$verify"; then
    fail "systemd-analyze verify warns about the unit: $verify"
fi

if command -v lintian >/dev/null; then
    echo "check-deb: lintian says (for information):"
    lintian --no-tag-display-limit "$deb" || true
fi

echo "check-deb: ok: $deb ($(wc -l <"$work/contents") entries) in $((SECONDS - started)) s"
