#!/usr/bin/env bash
# Worked example of docs/fslog.md: fsync-heavy fs_mark on XFS over a loop device, with the
# device's write cache in write-back and then write-through mode, read through the observer's
# log="true" series. Prints a table of log write rates and latencies (p50/p99 from the
# histogram buckets, Prometheus-style interpolation) and flush rates.
#
# Needs root, fs_mark (Debian package fsmark), xfsprogs, python3, a built observer
# (`cargo build -p observer`). Creates only its own loop device over a file in $EXAMPLE_DIR
# (default /tmp: a file on the machine's disk, so flushes reach real hardware; use /dev/shm for
# a RAM-backed one) and removes everything on exit.
#
# Usage: scripts/fslog-example.sh [files per run, default 4000]
set -euo pipefail
cd "$(dirname "$0")/.."

FILES=${1:-4000}
DIR=${EXAMPLE_DIR:-/tmp}
BIN=${OBSERVER_BIN:-target/debug/observer}
PORT=${EXAMPLE_PORT:-19688}
IMG="$DIR/blkobs-example-$$.img"
MNT="$(mktemp -d /tmp/blkobs-example-mnt.XXXXXX)"
LOOP=""
DAEMON=""

cleanup() {
  set +e
  [ -n "$DAEMON" ] && kill "$DAEMON" && wait "$DAEMON" 2>/dev/null
  mountpoint -q "$MNT" && umount "$MNT"
  rmdir "$MNT"
  [ -n "$LOOP" ] && losetup -d "$LOOP"
  rm -f "$IMG"
}
trap cleanup EXIT

for t in fs_mark mkfs.xfs losetup python3; do
  command -v "$t" >/dev/null || { echo "missing $t: apt-get install fsmark xfsprogs util-linux python3" >&2; exit 1; }
done
[ -x "$BIN" ] || { echo "no $BIN: run cargo build -p observer first" >&2; exit 1; }

truncate -s 2G "$IMG"
# Direct I/O from the loop driver to the backing file: no second page cache, flushes reach the disk.
LOOP=$(losetup -f --show --direct-io=on "$IMG")
DEV=${LOOP#/dev/}
mkfs.xfs -q -f "$LOOP"
mount "$LOOP" "$MNT"

OBSERVER_LOG=warn "$BIN" --listen "127.0.0.1:$PORT" --device "$DEV" 2>/dev/null &
DAEMON=$!
for _ in $(seq 100); do curl -sf "127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
sleep 3 # first log discovery
echo "log range of $DEV (GET /devices):"
curl -s "127.0.0.1:$PORT/devices" | python3 -c '
import json,sys
d=json.load(sys.stdin)
for x in d["devices"]:
    if x["device"]==sys.argv[1]: print("  ", x["log_ranges"], x["filesystems"])' "$DEV"

run() { # $1 = write_cache mode
  echo "$1" > "/sys/block/$DEV/queue/write_cache"
  rm -rf "$MNT/fsm"; sync; sleep 1
  curl -s "127.0.0.1:$PORT/metrics" > "/tmp/blkobs-example-before-$$"
  local t0 t1 fps
  t0=$(date +%s.%N)
  fps=$(fs_mark -d "$MNT/fsm" -n "$FILES" -s 4096 -S 1 -t 1 -k -l "/tmp/blkobs-example-fsmark-$$.log" | awk '/^ +[0-9]/ {print $4}')
  t1=$(date +%s.%N)
  sleep 1
  curl -s "127.0.0.1:$PORT/metrics" > "/tmp/blkobs-example-after-$$"
  python3 - "$DEV" "$1" "$fps" "$t0" "$t1" "/tmp/blkobs-example-before-$$" "/tmp/blkobs-example-after-$$" <<'EOF'
import re, sys
dev, mode, fps, t0, t1, fb, fa = sys.argv[1:]
secs = float(t1) - float(t0)
line = re.compile(r'^(\w+)\{(.*)\} (\S+)$')
def parse(path):
    out = []
    for l in open(path):
        m = line.match(l.strip())
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            out.append((m.group(1), labels, float(m.group(3))))
    return out
before, after = parse(fb), parse(fa)
def total(samples, name, want):
    agg = {}
    for n, l, v in samples:
        if n == name and all(l.get(k) == v2 for k, v2 in want.items()):
            key = l.get("le", "")
            agg[key] = agg.get(key, 0) + v
    return agg
def delta(name, want):
    a, b = total(after, name, want), total(before, name, want)
    return {k: a[k] - b.get(k, 0) for k in a}
def quantile(q, want):
    b = delta("blkobs_request_latency_seconds_bucket", want)
    les = sorted((float("inf") if k == "+Inf" else float(k), v) for k, v in b.items())
    n = les[-1][1] if les else 0
    if n == 0: return float("nan")
    rank, prev_le, prev_c = q * n, 0.0, 0.0
    for le, c in les:
        if c >= rank:
            if le == float("inf"): return prev_le
            return prev_le + (le - prev_le) * (rank - prev_c) / max(c - prev_c, 1e-9)
        prev_le, prev_c = le, c
    return prev_le
def count(name, want):
    return sum(delta(name, want).values())
logw = {"device": dev, "op": "write", "log": "true"}
fl = {"device": dev, "op": "flush"}
n_log = count("blkobs_requests_total", logw)
n_data = count("blkobs_requests_total", {"device": dev, "op": "write", "log": "false"})
n_fl = count("blkobs_requests_total", fl)
fua = count("blkobs_requests_total", dict(logw, fua="true"))
pre = count("blkobs_requests_total", dict(logw, preflush="true"))
ms = lambda s: f"{s*1e3:.3f}"
print(f"| {mode} | {fps} | {n_log/secs:.0f} | {fua/max(n_log,1):.2f} / {pre/max(n_log,1):.2f} "
      f"| {ms(quantile(.5, dict(logw, stage='queue')))} / {ms(quantile(.99, dict(logw, stage='queue')))} "
      f"| {ms(quantile(.5, dict(logw, stage='device')))} / {ms(quantile(.99, dict(logw, stage='device')))} "
      f"| {ms(quantile(.5, dict(logw, stage='total')))} / {ms(quantile(.99, dict(logw, stage='total')))} "
      f"| {n_fl/secs:.0f} | {ms(quantile(.5, dict(fl, stage='device')))} / {ms(quantile(.99, dict(fl, stage='device')))} "
      f"| {n_data/secs:.0f} |")
EOF
}

echo
echo "| write_cache | fs_mark files/s | log writes/s | log writes with FUA / PREFLUSH | log queue p50 / p99 (ms) | log device p50 / p99 (ms) | log total p50 / p99 (ms) | flushes/s | flush device p50 / p99 (ms) | other writes/s |"
echo "|---|---|---|---|---|---|---|---|---|---|"
run "write back"
run "write through"
run "write back"
rm -f "/tmp/blkobs-example-before-$$" "/tmp/blkobs-example-after-$$" "/tmp/blkobs-example-fsmark-$$.log"
