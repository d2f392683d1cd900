#!/bin/sh
# /init of the kernel-matrix initramfs (xtask/src/vm.rs writes it with busybox-static, the modules
# needed to reach the host's root filesystem and /vm.conf). Mounts the host root (virtiofs, read-only)
# at /mnt/root, the workspace (virtiofs, read-write) at its own path inside it, loads the test modules
# with the host's modprobe, runs the payload chrooted into the host root and powers off.
# The console lines starting with BLKOBS-VM- are read by the host: keep them in step with vm.rs.
/bin/busybox --install -s /bin
export PATH=/bin
mkdir -p /proc /sys /dev /mnt/root
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
. /vm.conf   # LABEL KVER MODROOT WORKSPACE PAYLOAD RCFILE SKIPLOG CI_VALUE WATCHDOG

fail() { echo "BLKOBS-VM-FAIL: $*"; echo o > /proc/sysrq-trigger; sleep 30; }

up() { cut -d" " -f1 /proc/uptime; }
echo "BLKOBS-VM-INIT: kernel $(uname -r) ($LABEL), uptime $(up)s"
for m in $(cat /modules.order 2>/dev/null); do
  insmod "/modules/$m" || echo "BLKOBS-VM: insmod $m failed"
done

R=/mnt/root
mount -t virtiofs -o ro hostroot $R || fail "mounting the host root (virtiofs tag hostroot)"
mount -t proc proc $R/proc
mount -t sysfs sys $R/sys
mount -t devtmpfs dev $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts $R/dev/pts
mount -t tmpfs -o size=1536m,mode=1777 tmpfs $R/tmp
mount -t tmpfs -o mode=755 tmpfs $R/run
mount -t tmpfs -o size=256m,mode=1777 tmpfs $R/var/tmp
mount -t tmpfs -o mode=1777 tmpfs $R/dev/shm
mount -t tracefs tracefs $R/sys/kernel/tracing || echo "BLKOBS-VM: no tracefs"
mount -t debugfs debugfs $R/sys/kernel/debug || echo "BLKOBS-VM: no debugfs"
# Pin the hot tracepoints' probes for the whole run. A tracepoint's call sites are rewritten
# (text_poke_bp: int3, new bytes, int3 removed) when its probes go 0 -> 1 (static key) and
# 1 <-> 2 (static call: one probe or the iterator), and tests start and stop ftrace instances
# (which also hook sched_switch/sched_wakeup to record comms) and the daemon under load. Under
# TCG a vCPU can still run the int3 after the patch finished: "Oops: int3" in __schedule on
# 6.12 (CI, md_stacks' ftrace rounds). Two idle instances keep each of these at >= 2 probes
# (kernel/tracepoint.c: N -> N+1 with N >= 2 patches nothing): every block event, and the sched
# events ftrace itself hooks (comm recording: kernel/trace/trace_sched_switch.c; set_event_pid
# and event-fork: kernel/trace/trace_events.c). Only those: all of events/sched made the guest
# suites ~18 % slower (5.10 1,294 s, 6.1 1,267 s vs 1,093 s and 1,067 s).
T=$R/sys/kernel/tracing
for i in 1 2; do
  P=$T/instances/blkobs-vm-pin$i
  pinned=1
  mkdir "$P" && echo 0 > "$P/tracing_on" && echo 4 > "$P/buffer_size_kb" &&
    echo 1 > "$P/events/block/enable" || pinned=0
  for e in sched_switch sched_wakeup sched_wakeup_new sched_waking sched_process_fork sched_process_free; do
    echo 1 > "$P/events/sched/$e/enable" || pinned=0
  done
  [ $pinned = 1 ] || echo "BLKOBS-VM: could not pin tracepoint probes ($P)"
done
mount -t cgroup2 cgroup2 $R/sys/fs/cgroup || echo "BLKOBS-VM: no cgroup2"
mount -t bpf bpf $R/sys/fs/bpf || echo "BLKOBS-VM: no bpffs"
# A workspace under /tmp, /run or /var/tmp is hidden by the tmpfs just mounted there: make its
# mount point in that tmpfs (elsewhere it exists in the read-only host root already).
[ -d "$R$WORKSPACE" ] || mkdir -p "$R$WORKSPACE"
mount -t virtiofs workspace "$R$WORKSPACE" || fail "mounting the workspace $WORKSPACE (virtiofs tag workspace)"
echo "BLKOBS-VM: host root and workspace mounted, uptime $(up)s"

# Test modules, with the host's kmod against the unpacked package (depmod ran on the host). The
# payload gets its path as BLKOBS_VM_MODROOT for more: `modprobe -d "$BLKOBS_VM_MODROOT" null_blk`.
# One modprobe for all (each start is slow under TCG); then report what is missing.
MODS="loop xfs ext4 mq-deadline fuse dm-mod dm-delay dm-flakey dm-crypt dm-thin-pool raid0 raid1 raid10 raid456 virtio_blk virtio_scsi sd_mod nvme"
chroot $R /sbin/modprobe -a -d "$MODROOT" -S "$KVER" $MODS 2>&1
for m in $MODS; do
  [ -e "/sys/module/$(echo $m | tr - _)" ] && continue
  grep -qE "/$m\.ko(\.xz|\.zst)?\$" "$R$MODROOT/lib/modules/$KVER/modules.builtin" && continue
  echo "BLKOBS-VM: module $m not available on $KVER"
done
ip link set lo up
echo "BLKOBS-VM: modules loaded, uptime $(up)s"

# Watchdog: a payload still running after $WATCHDOG s is hung (a normal run takes ~8 min).
# Dump every task's state, wait channel and kernel stack to the console (the hung-task
# detector misses killable and interruptible sleeps, e.g. a FUSE/virtiofs request), twice.
dump_tasks() {
  echo "BLKOBS-VM-WATCHDOG: payload still running at uptime $(up)s; user threads, and kernel threads in D:"
  for t in /proc/[0-9]*/task/[0-9]*; do
    st=$(sed -n 's/^State:[[:space:]]*//p' $t/status 2>/dev/null)
    cmd=$(tr '\0' ' ' < $t/cmdline 2>/dev/null | cut -c1-160)
    case "$st" in ""|I*) continue ;; esac
    [ -z "$cmd" ] && case "$st" in D*) ;; *) continue ;; esac
    echo "BLKOBS-VM-WATCHDOG: ${t#/proc/} [$st] $(cat $t/comm 2>/dev/null): $cmd"
    sed 's/^/BLKOBS-VM-WATCHDOG:     /' $t/stack 2>/dev/null | head -16
  done
  echo w > /proc/sysrq-trigger
}
( sleep "${WATCHDOG:-570}"; dump_tasks; sleep 60; dump_tasks ) &
WATCHDOG_PID=$!

echo "BLKOBS-VM-PAYLOAD-START uptime $(up)s"
env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb \
  ${CI_VALUE:+CI="$CI_VALUE"} BLKOBS_VM=1 BLKOBS_VM_KERNEL="$LABEL" BLKOBS_VM_MODROOT="$MODROOT" \
  BLKOBS_SKIP_LOG="$WORKSPACE/$SKIPLOG" \
  chroot $R /bin/sh -c 'cd "$1" && exec /bin/sh "$2"' vm-payload "$WORKSPACE" "$PAYLOAD" </dev/console
rc=$?
kill $WATCHDOG_PID 2>/dev/null
echo "$rc" > "$R$WORKSPACE/$RCFILE"
sync
echo "BLKOBS-VM-RC=$rc"
echo o > /proc/sysrq-trigger
sleep 30
