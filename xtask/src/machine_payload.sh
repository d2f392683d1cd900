#!/bin/sh
# `cargo xtask machine`: what a user does on a Debian machine, run by systemd (PID 1) from the
# unit blkobs-payload.service baked into the image, with this script and the packages on a
# read-only disk (label blkobs-pay, mounted at $P). Phase 1 installs, runs, reloads and stops the
# service and reboots the guest; phase 2 (after the reboot) checks it came back, upgrades it and
# purges it, then powers off. Every check prints one line the host parses:
#   BLKOBS-CHECK ok <name>      or      BLKOBS-CHECK FAIL <name> (what was wrong, indented after)
# and BLKOBS-SHOW <title> blocks are what a user sees (apt, systemctl status, journal).
P=/run/blkobs-payload
STATE=/var/lib/blkobs-payload
URL=http://127.0.0.1:9617
export DEBIAN_FRONTEND=noninteractive PATH=/usr/sbin:/usr/bin:/sbin:/bin
mkdir -p $STATE

check() { # name command...: ok when the command succeeds; its last 2 lines shown (20 when it fails)
  name=$1; shift
  if out=$("$@" 2>&1); then
    echo "BLKOBS-CHECK ok $name"
    [ -n "$out" ] && echo "$out" | tail -2 | sed "s/^/    /"
  else echo "BLKOBS-CHECK FAIL $name"; echo "$out" | tail -20 | sed 's/^/    /'; fi
}
show() { # title command...
  t=$1; shift; echo "BLKOBS-SHOW $t"; "$@" 2>&1 | sed 's/^/    /'
}
wait_active() { # the unit active within 90 s
  i=0; while [ $i -lt 90 ]; do
    [ "$(systemctl is-active observer)" = active ] && curl -sf $URL/healthz >/dev/null && return 0
    sleep 1; i=$((i + 1)); done
  systemctl status observer --no-pager; return 1
}
# The sum of one op's request counts of one disk (every class), total stage.
count() { # device op
  curl -sf $URL/metrics | awk -v d="device=\"$1\"" -v o="op=\"$2\"" '
    /^blkobs_request_latency_seconds_count\{/ && index($0, d) && index($0, o) && index($0, "stage=\"total\"") { s += $NF }
    END { printf "%d\n", s }'
}
# The daemon's housekeeping passes (blkobs_reaper_passes_total, one a second: rescan, reaper).
passes() { curl -sf $URL/metrics | awk '/^blkobs_reaper_passes_total/ { printf "%d\n", $NF; exit }'; }
within60() { # command...: run every 0.1 s until it succeeds, for 60 s at most (a hang guard)
  _w=0; until "$@"; do _w=$((_w + 1)); [ $_w -lt 600 ] || return 1; sleep 0.1; done
}
passes_reach() { [ "$(passes)" -ge "$1" ]; }
wait_passes() { p0=$(passes) && [ -n "$p0" ] && within60 passes_reach $((p0 + $1)); } # n more than now
journal_count() { journalctl -u observer --no-pager -o cat | grep -c "$1"; }
journal_above() { [ "$(journal_count "$1")" -gt "$2" ]; }
wait_journal() { within60 journal_above "$1" "$2"; } # pattern count: more lines with it than count
diskstat() { # device field (1 = reads completed, 5 = writes completed)
  awk -v f="$2" '{ print $f }' /sys/block/$1/stat
}
exact_reads() { # device: a fixed number of direct reads, counted as /proc/diskstats counts them
  d=$1; c0=$(count $d read); s0=$(diskstat $d 1)
  fio --name=w --filename=/dev/$d --rw=randread --bs=4k --direct=1 --size=64m --number_ios=2000 \
    --ioengine=psync --output=/dev/null || return 1
  wait_passes 2 || return 1 # the completions' last per-CPU values read into /metrics
  c1=$(count $d read); s1=$(diskstat $d 1)
  echo "$d reads: observer $((c1 - c0)), diskstats $((s1 - s0))"
  [ $((c1 - c0)) -eq $((s1 - s0)) ] && [ $((s1 - s0)) -ge 2000 ]
}
our_progs() { # bpftool's names of the observer's programs (rq_issue, bio_queue, ...)
  bpftool prog show 2>/dev/null | grep -cE 'name (rq_|bio_|io_start)' ; }
has_progs() { n=$(our_progs); echo "observer's BPF programs loaded: $n"; [ "$n" -gt 0 ]; }
no_progs() { n=$(our_progs); echo "observer's BPF programs loaded: $n"; [ "$n" -eq 0 ]; }

# Prometheus (Debian's) and the dashboards' own queries (queries.tsv: file, panel, legend, expr).
PROM=http://127.0.0.1:9090
promq() { curl -sf --data-urlencode "query=$1" $PROM/api/v1/query; }
subst() { # expr window device: Grafana's variables as a dashboard user would pick them (instance: All = .+, model: All = .*, which includes disks without a model)
  printf '%s' "$1" | sed -e "s/\$__rate_interval/$2/g" -e "s/\${device}/$3/g" -e "s/\$device/$3/g" -e "s/\$op/.+/g" \
    -e "s/\${instance}/.+/g" -e "s/\$instance/.+/g" -e "s/\${model}/.*/g" -e "s/\$model/.*/g"
}
dash_q() { # file panel-title legend: that panel's expression
  awk -F '\t' -v f="$1" -v t="$2" -v l="$3" '$1 == f && $2 == t && $3 == l { print $4; exit }' $P/queries.tsv
}
finite() { case "$1" in ''|none|NaN|+Inf|-Inf) return 1;; esac; }
last_scrape() { # unix seconds of Prometheus's latest scrape of the observer (0 before the first)
  promq 'max(timestamp(up{instance="127.0.0.1:9617"}))' | jq -r '.data.result[0].value[1] // "0"' | cut -d. -f1
}
scrape_newer() { [ "$(last_scrape)" -gt "$1" ]; }
scraped_after() { within60 scrape_newer "$1"; } # unix seconds: a scrape after it (scrape_interval 15 s)
# The seeds' scenario: fs_mark -S1 (create, write 4 KiB, fsync, close per file) on XFS with the
# disk's write cache in write-back, then write-through; Prometheus computes the log writes' p99
# queue and device latency from the filesystem-log dashboard's own expressions over each run,
# a window from a scrape before the first file to one after the last. The run goes on past
# 1,000 files until a scrape fell inside it: a series its first writes create needs two samples.
fsmark_run() { # mode (back|through)
  echo "write $1" > /sys/block/vdc/queue/write_cache
  t0=$(date +%s); scraped_after $t0 || { echo "Prometheus did not scrape the observer in 60 s"; return 1; }
  r0=$(date +%s.%N); files=0; rates=""
  while [ $files -lt 1000 ] || [ "$(last_scrape)" -le "$tb" ]; do
    d=/mnt/xfs/$1-$files; mkdir -p $d
    r=$(fs_mark -S1 -s 4096 -n 100 -t 1 -d $d 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && NF >= 5 { v = $4 } END { print v }')
    rates="$rates $r"; files=$((files + 100))
    [ $files -eq 100 ] && tb=$(date +%s)
  done
  r1=$(date +%s.%N); t1=$(date +%s)
  scraped_after $t1 || { echo "Prometheus did not scrape the observer in 60 s"; return 1; }
  w=$(( $(date +%s) - t0 + 1 ))s
  spread=$(echo $rates | tr ' ' '\n' | sort -n | awk '{ v[NR] = $1 } END { printf "min %s, median %s, max %s", v[1], v[int((NR + 1) / 2)], v[NR] }')
  q=$(promq "$(subst "$(dash_q blkobs-fslog.json 'Log write dispatch (queue) latency percentiles' '{{device}} p99')" $w vdc)" | jq -r '.data.result[0].value[1] // "none"')
  dv=$(promq "$(subst "$(dash_q blkobs-fslog.json 'Log write device latency percentiles' '{{device}} p99')" $w vdc)" | jq -r '.data.result[0].value[1] // "none"')
  echo "BLKOBS-SEEDS write $1: fs_mark -S1 $files files in $(awk -v a=$r0 -v b=$r1 'BEGIN { printf "%.1f s, %.0f", b - a, '$files' / (b - a) }') files/s (Files/sec of its 100-file runs: $spread); log writes p99 over ${w} (Prometheus, the dashboard's expressions): queue $q s, device $dv s"
  finite "$q" && finite "$dv"
}
dashboards_all() { # every query of every shipped dashboard, devices and ops '.+', 5m windows
  empty=""; : > $STATE/dashboards.txt
  while IFS="$(printf '\t')" read -r f title legend expr; do
    n=$(promq "$(subst "$expr" 5m '.+')" | jq '[.data.result | if type == "array" then .[] | select(.value[1] != "NaN") else . end] | length')
    echo "$n  $f: $title [$legend]" >> $STATE/dashboards.txt
    [ "${n:-0}" -gt 0 ] || empty="$empty; $f: $title [$legend]"
  done < $P/queries.tsv
  [ -z "$empty" ] || { echo "no data:$empty"; return 1; }
}
stalled_write() { # a direct write held 3 s by dm-delay over nvme0n1: /stalls lists it while held
  sz=$(blockdev --getsz /dev/nvme0n1)
  dmsetup create blkobs-slow --table "0 $sz delay /dev/nvme0n1 0 0 /dev/nvme0n1 0 3000" || return 1
  dm=$(basename "$(readlink -f /dev/mapper/blkobs-slow)")
  dd if=/dev/zero of=/dev/mapper/blkobs-slow bs=4k count=1 oflag=direct status=none & w=$!
  # /stalls while dd waits: until it lists the write or dd is done.
  while curl -sf $URL/stalls > $STATE/stalls.txt && ! grep -qE "^$dm +[a-z]+ +[0-9.]+m?s .* W" $STATE/stalls.txt && kill -0 $w 2>/dev/null; do
    sleep 0.2; done
  wait
  udevadm settle; dmsetup remove --retry blkobs-slow # udev may still hold it open (trixie)
  echo "$dm while the write was held:"; sed -n '1,4p' $STATE/stalls.txt
  grep -qE "^$dm +[a-z]+ +[0-9.]+m?s .* W" $STATE/stalls.txt
}
owner_cgroup() { # direct writes by a transient unit with IO accounting: its cgroup label = its io.stat
  sed -i "s/^label = false$/label = true/" /etc/observer/observer.toml
  n=$(journal_count "configuration reloaded")
  systemctl reload observer && wait_journal "configuration reloaded" $n || return 1
  cg=/system.slice/blkobs-writer.service; rm -f $STATE/writer-done
  systemd-run -q --unit blkobs-writer -p IOAccounting=yes sh -c \
    "dd if=/dev/zero of=/dev/nvme0n1 bs=64k count=16 oflag=direct status=none; touch $STATE/writer-done; sleep 30"
  within60 test -e $STATE/writer-done || return 1
  wait_passes 2 || return 1
  mm=$(cat /sys/block/nvme0n1/dev)
  io=$(awk -v d="$mm" '$1 == d { for (i = 2; i <= NF; i++) if ($i ~ /^wbytes=/) print substr($i, 8) }' /sys/fs/cgroup$cg/io.stat)
  ours=$(curl -sf $URL/metrics | awk -v c="cgroup=\"$cg\"" '/^blkobs_bytes_total\{/ && index($0, c) && index($0, "device=\"nvme0n1\"") && index($0, "op=\"write\"") { s += $NF } END { printf "%d\n", s }')
  systemctl stop blkobs-writer
  echo "$cg writes on nvme0n1: observer blkobs_bytes_total{cgroup} $ours, its io.stat wbytes $io"
  [ -n "$io" ] && [ "$ours" -eq "$io" ] && [ "$io" -ge 1048576 ]
}
ext4_log() { # ext4 on nvme0n1: its journal's writes are log="true", at least one per committed transaction
  udevadm settle
  h=$(ls /sys/block/nvme0n1/holders); [ -z "$h" ] || { echo "nvme0n1 still held by: $h"; return 1; }
  mkfs.ext4 -q -F /dev/nvme0n1 && mkdir -p /mnt/ext4 && mount /dev/nvme0n1 /mnt/ext4 || return 1
  found() { # the mount seen and its journal located (a rescan each pass)
    curl -sf $URL/devices > $STATE/devices.json && jq -e '.devices[] | select(.device == "nvme0n1") |
      .filesystems[0].log_status == "found" and (.log_ranges | length) > 0' $STATE/devices.json >/dev/null; }
  within60 found # the check below says what was missing
  jq -c '.devices[] | select(.device == "nvme0n1") | {device, filesystems, log_ranges}' $STATE/devices.json
  logs() { curl -sf $URL/metrics | awk '/^blkobs_request_latency_seconds_count\{/ && index($0, "device=\"nvme0n1\"") && index($0, "log=\"true\"") && index($0, "op=\"write\"") && index($0, "stage=\"total\"") { s += $NF } END { printf "%d\n", s }'; }
  tx() { awk '/ transactions / { print $1; exit }' /proc/fs/jbd2/nvme0n1-8/info; }
  l0=$(logs); t0=$(tx)
  i=0; while [ $i -lt 50 ]; do echo $i > /mnt/ext4/f$i && sync -d /mnt/ext4/f$i; i=$((i + 1)); done
  wait_passes 2 || return 1
  l1=$(logs); t1=$(tx)
  umount /mnt/ext4
  echo "ext4 on nvme0n1, 50 × (write + fdatasync): log=\"true\" writes $((l1 - l0)), jbd2 transactions $((t1 - t0))"
  jq -e '.devices[] | select(.device == "nvme0n1") | .filesystems[0].log_status == "found" and (.log_ranges | length) > 0' $STATE/devices.json >/dev/null &&
    [ $((t1 - t0)) -gt 0 ] && [ $((l1 - l0)) -ge $((t1 - t0)) ]
}
tls() { # the documented web config under the real unit: LoadCredential drop-in, TLS + basic auth
  mkdir -p /etc/observer/tls /etc/systemd/system/observer.service.d
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=127.0.0.1 \
    -addext subjectAltName=IP:127.0.0.1 -keyout /etc/observer/tls/observer.key \
    -out /etc/observer/tls/observer.crt 2>/dev/null || return 1
  chmod 600 /etc/observer/tls/observer.key
  # The example of docs/operations.md: user prometheus, password "change me".
  printf '%s\n' 'tls_server_config:' '  cert_file: observer.crt' '  key_file: observer.key' \
    'basic_auth_users:' '  prometheus: $2y$10$BbHMl4rRMeUzpxGIQbPUWeEhVLfetiZmulLVDObIAm7WVKNn11HoW' \
    > /etc/observer/web-config.yml
  # The unit's own commented lines, uncommented, as a drop-in.
  { echo '[Service]'; sed -n 's/^#\(LoadCredential=\|Environment=OBSERVER_WEB_CONFIG_FILE=\)/\1/p' /lib/systemd/system/observer.service; } \
    > /etc/systemd/system/observer.service.d/tls.conf
  cat /etc/systemd/system/observer.service.d/tls.conf
  systemctl daemon-reload && systemctl restart observer || return 1
  S=https://127.0.0.1:9617; C="--cacert /etc/observer/tls/observer.crt"
  i=0; until curl -sf $C -u 'prometheus:change me' $S/healthz >/dev/null; do
    i=$((i + 1)); [ $i -lt 60 ] || { systemctl status observer --no-pager; return 1; }; sleep 1; done
  code=$(curl -s -o /dev/null -w '%{http_code}' $C $S/metrics)
  bad=$(curl -s -o /dev/null -w '%{http_code}' $C -u 'prometheus:wrong' $S/metrics)
  n=$(curl -sf $C -u 'prometheus:change me' $S/metrics | grep -c '^blkobs_request_latency_seconds_count')
  plain=$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:9617/healthz)
  echo "https with the password: $n latency series; without: HTTP $code; wrong password: HTTP $bad; plain http: '$plain'"
  rm -r /etc/systemd/system/observer.service.d /etc/observer/web-config.yml /etc/observer/tls
  systemctl daemon-reload && systemctl restart observer && wait_active || return 1
  [ "$n" -gt 0 ] && [ "$code" = 401 ] && [ "$bad" = 401 ] && [ "$plain" != 200 ]
}
disk_identity() { # nvme0n1 and vdc: GET /devices' identity = lsblk's (udev's database), the info series
  # bookworm's udev has no firmware revision for NVMe (lsblk REV empty): there the witness is the
  # emulating qemu's version, which it sets as the controller's FR (hw/nvme/ctrl.c).
  for d in nvme0n1 vdc; do
    ours=$(curl -sf $URL/devices | jq -r --arg d $d '.devices[] | select(.device == $d) | .identity |
      [.model, .serial, .revision, (.rotational | tostring), (.logical_block_size | tostring),
       (.physical_block_size | tostring), .scheduler] | join("|")')
    theirs=$(lsblk -J -d -o NAME,MODEL,SERIAL,REV,ROTA,LOG-SEC,PHY-SEC,SCHED /dev/$d | jq -r '.blockdevices[0] |
      [.model // "", .serial // "", .rev // "", (.rota | tostring), (."log-sec" | tostring),
       (."phy-sec" | tostring), .sched // "none"] | map(gsub("^ +| +$"; "")) | join("|")')
    case $d in nvme*)
      theirs=$(echo "$theirs" | awk -F'|' -v q="$(cat $P/qemu_version)" 'BEGIN{OFS="|"} $3=="" {$3=q} {print}') ;;
    esac
    echo "$d: observer $ours; lsblk $theirs"
    [ -n "$ours" ] && [ "$ours" = "$theirs" ] || return 1
  done
  curl -sf $URL/metrics | grep '^blkobs_disk_info{device="nvme0n1"' | grep -q 'serial="blkobs0"'
}
mixin_rules() { # the shipped rules loaded by Prometheus, healthy, and the log-write p99 recorded for vdc
  promq 'count(ALERTS)' >/dev/null || return 1
  curl -sf $PROM/api/v1/rules > $STATE/rules.json
  n=$(jq '[.data.groups[].rules[]] | length' $STATE/rules.json)
  bad=$(jq -r '[.data.groups[].rules[] | select(.health != "ok") | .name] | join(", ")' $STATE/rules.json)
  firing=$(jq -r '[.data.groups[].rules[] | select(.type == "alerting") | .alerts[] | .labels.alertname + "(" + .state + ")"] | join(", ")' $STATE/rules.json)
  v=$(promq 'instance_device_stage:blkobs_log_write_latency_seconds:p99_5m{device="vdc",stage="total"}' | jq -r '.data.result[0].value[1] // "none"')
  echo "rules loaded: $n, unhealthy: '${bad}', alerts pending or firing: '${firing}'; recorded log-write p99 on vdc: $v s"
  [ "$n" -ge 15 ] && [ -z "$bad" ] && finite "$v"
}
seeds() {
  cp /usr/share/doc/observer/prometheus.yml /usr/share/doc/observer/blkobs-rules.yml /etc/prometheus/
  mkdir -p /etc/prometheus/blkobs-targets
  printf -- '- targets: ["127.0.0.1:9617"]\n' > /etc/prometheus/blkobs-targets/machine.yml
  check "promtool: the shipped scrape config" promtool check config /etc/prometheus/prometheus.yml
  sysctl -q kernel.bpf_stats_enabled=1 # the dashboards' eBPF cost panels
  check "prometheus started" systemctl start prometheus
  check "XFS on vdc" sh -c 'mkfs.xfs -f -q /dev/vdc && mkdir -p /mnt/xfs && mount /dev/vdc /mnt/xfs'
  check "fs_mark, write back: log p99 from the dashboard" fsmark_run back
  check "fs_mark, write through: log p99 from the dashboard" fsmark_run through
  check "the shipped rules (mixin) loaded and recording" mixin_rules
  check "/stalls lists a write held by dm-delay" stalled_write
  show "curl /stalls while it was held" cat $STATE/stalls.txt
  check "every dashboard query returns data" dashboards_all
  show "every dashboard query: result series, file: panel [legend]" cat $STATE/dashboards.txt
  umount /mnt/xfs
}

phase=$(cat $STATE/phase 2>/dev/null || echo 1)
echo "BLKOBS-MACHINE phase $phase: $(uname -r), $(systemctl --version | head -1), $(. /etc/os-release; echo "$PRETTY_NAME")"

if [ "$phase" = 1 ]; then
  show "apt install ./observer_v1.deb (last lines)" sh -c "apt-get install -y $P/observer_v1.deb 2>&1 | tail -6"
  check installed dpkg -s observer
  check "man pages and bash completion installed" sh -c 'grep -q "^\.TH observer " /usr/share/man/man1/observer.1 && grep -q "^\.TH observer-stalls " /usr/share/man/man1/observer-stalls.1 && bash -c ". /usr/share/bash-completion/completions/observer && complete -p observer"'
  check unit-not-enabled-by-package sh -c '[ "$(systemctl is-enabled observer)" = disabled ]'
  check enable-now systemctl enable --now observer
  check active wait_active
  show "systemctl status observer" systemctl status observer --no-pager -n 5
  check "programs attached" has_progs
  check "enabled" test -L /etc/systemd/system/multi-user.target.wants/observer.service
  for e in $(cat $P/endpoints); do # every path of observer/src/http/endpoints.rs
    check "endpoint $e" curl -sf -o /dev/null $URL$e
  done
  check "build_info" sh -c "curl -sf $URL/metrics | grep '^blkobs_build_info'"
  check "nvme0n1 reads = diskstats" exact_reads nvme0n1
  check "vdc reads = diskstats" exact_reads vdc
  check "disk identity = lsblk (udev)" disk_identity
  seeds
  check "owner cgroup label = the unit's io.stat" owner_cgroup
  check "ext4 journal writes labelled log" ext4_log
  check "TLS and basic auth under the unit (LoadCredential)" tls
  # Reload: a good change is applied, a bad file is rejected and the old configuration stays.
  cp /etc/observer/observer.toml $STATE/observer.toml.orig
  n=$(journal_count "configuration reloaded")
  check reload systemctl reload observer
  check "reload logged" wait_journal "configuration reloaded" $n
  show "journal: reload" journalctl -u observer --no-pager -n 3 -o cat
  echo 'this is not toml [' >> /etc/observer/observer.toml
  n=$(journal_count "configuration reload rejected")
  systemctl reload observer
  check "bad reload rejected" wait_journal "configuration reload rejected" $n
  show "journal: bad reload" journalctl -u observer --no-pager -n 2 -o cat
  check "still active after bad reload" wait_active
  cp $STATE/observer.toml.orig /etc/observer/observer.toml
  check stop systemctl stop observer
  check "stop detaches every program" no_progs
  check start-again systemctl start observer
  check active-again wait_active
  echo 2 > $STATE/phase
  echo "BLKOBS-MACHINE rebooting"
  systemctl reboot
  exit 0
fi

if [ "$phase" = 2 ]; then
  check "active after reboot" wait_active
  check "nvme0n1 reads = diskstats after reboot" exact_reads nvme0n1
  echo "# kept across the upgrade" >> /etc/observer/observer.toml
  pid1=$(systemctl show -p MainPID --value observer)
  show "apt install ./observer_v2.deb (last lines)" sh -c "apt-get install -y $P/observer_v2.deb 2>&1 | tail -6"
  check "upgraded" sh -c "dpkg -s observer | grep -q '^Version: .*-2$'"
  check "config kept" grep -q "kept across the upgrade" /etc/observer/observer.toml
  check "active after upgrade" wait_active
  pid2=$(systemctl show -p MainPID --value observer)
  check "restarted by the upgrade" sh -c "echo 'MainPID $pid1 -> $pid2'; [ '$pid1' != '$pid2' ]"
  show "journal: upgrade" journalctl -u observer --no-pager -n 4 -o cat
  show "apt purge observer (last lines)" sh -c 'apt-get purge -y observer 2>&1 | tail -4'
  check "purged: package" sh -c '! dpkg -s observer >/dev/null 2>&1'
  check "purged: files" sh -c 'for f in /usr/bin/observer /etc/observer /usr/lib/systemd/system/observer.service /lib/systemd/system/observer.service /usr/share/observer /var/lib/observer /var/lib/private/observer; do [ -e $f ] && { echo "left: $f"; exit 1; }; done; true'
  check "purged: programs" no_progs
  check "purged: unit" sh -c '! systemctl cat observer >/dev/null 2>&1'
  check "purged: enable links" sh -c '! test -e /etc/systemd/system/multi-user.target.wants/observer.service && ! test -L /etc/systemd/system/multi-user.target.wants/observer.service'
  echo 3 > $STATE/phase
fi
echo "BLKOBS-MACHINE-DONE"
systemctl poweroff
