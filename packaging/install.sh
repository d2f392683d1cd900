#!/usr/bin/env bash
# Installs the observer daemon, its systemd unit, default config, docs and dashboards on this host
# (or into a staging directory with --destdir, e.g. for building an image).
#
#   packaging/install.sh [--destdir DIR] [--binary PATH] [--no-build] [--uninstall]
#
# Default binary: target/release/observer, built first with `cargo build --release -p observer`
# unless --no-build or --binary is given. The config file is never overwritten: an existing
# /etc/observer/observer.toml is kept and the new default goes next to it as observer.toml.dist.
# Nothing is started: the script prints the systemctl commands to run.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
destdir=""
binary=""
build=1
uninstall=0

die() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --destdir) destdir="${2:?--destdir needs a directory}"; shift 2 ;;
    --binary) binary="${2:?--binary needs a path}"; build=0; shift 2 ;;
    --no-build) build=0; shift ;;
    --uninstall) uninstall=1; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (try --help)" ;;
  esac
done

BIN_DIR=/usr/bin
UNIT_DIR=/lib/systemd/system
CONF_DIR=/etc/observer
DOC_DIR=/usr/share/doc/observer
SHARE_DIR=/usr/share/observer

if [ "$uninstall" -eq 1 ]; then
  rm -f "$destdir$BIN_DIR/observer" "$destdir$UNIT_DIR/observer.service"
  rm -rf "$destdir$DOC_DIR" "$destdir$SHARE_DIR"
  echo "removed binary, unit, docs and dashboards; kept $destdir$CONF_DIR (remove it yourself if unwanted)"
  [ -z "$destdir" ] && [ -d /run/systemd/system ] && systemctl daemon-reload || true
  exit 0
fi

if [ -z "$destdir" ] && [ "$(id -u)" -ne 0 ]; then
  die "installing into / needs root: run with sudo, or stage with --destdir DIR"
fi
if [ -z "$binary" ]; then
  binary="$root/target/release/observer"
  if [ "$build" -eq 1 ]; then
    (cd "$root" && cargo build --release -p observer) || die "build failed; see above (scripts/provision.sh installs the toolchain)"
  fi
fi
[ -x "$binary" ] || die "no executable at $binary: build it (cargo build --release -p observer) or pass --binary PATH"
"$binary" --version >/dev/null || die "$binary does not run on this host"

install -d -m 0755 "$destdir$BIN_DIR" "$destdir$UNIT_DIR" "$destdir$CONF_DIR" "$destdir$DOC_DIR" "$destdir$SHARE_DIR/dashboards"
install -m 0755 "$binary" "$destdir$BIN_DIR/observer"
install -m 0644 "$here/observer.service" "$destdir$UNIT_DIR/observer.service"
if [ -e "$destdir$CONF_DIR/observer.toml" ]; then
  install -m 0644 "$here/observer.toml" "$destdir$CONF_DIR/observer.toml.dist"
  echo "kept existing $destdir$CONF_DIR/observer.toml; the new default is observer.toml.dist"
else
  install -m 0644 "$here/observer.toml" "$destdir$CONF_DIR/observer.toml"
fi
"$destdir$BIN_DIR/observer" --config "$destdir$CONF_DIR/observer.toml" --check-config >/dev/null \
  || die "the installed config $destdir$CONF_DIR/observer.toml is invalid: fix it (the message above names the key)"
install -m 0644 "$root/docs/src/operations.md" "$destdir$DOC_DIR/operations.md"
install -m 0644 "$here/prometheus.yml" "$destdir$DOC_DIR/prometheus.yml"
install -m 0644 "$here/blkobs-rules.yml" "$destdir$DOC_DIR/blkobs-rules.yml"
install -m 0644 "$here/k8s/daemonset.yaml" "$destdir$DOC_DIR/daemonset.yaml"
for f in "$root"/dashboards/*.json; do
  install -m 0644 "$f" "$destdir$SHARE_DIR/dashboards/"
done
install -d -m 0755 "$destdir$DOC_DIR/grafana-provisioning"
install -m 0644 "$root"/dashboards/provisioning/*.yaml "$destdir$DOC_DIR/grafana-provisioning/"

echo "installed observer into ${destdir:-/}"
if [ -z "$destdir" ]; then
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    echo "start it with: systemctl enable --now observer"
  else
    echo "systemd is not running here; start it by hand: observer --config $CONF_DIR/observer.toml"
  fi
fi
