#!/usr/bin/env bash
# Installs everything needed to build the eBPF programs (Debian route) and to run the test suite.
# Idempotent: every step checks first. Needs root (apt-get) and access to Debian's and crates.io's registries.
set -euo pipefail

log() { printf '[provision] %s\n' "$*" >&2; }

# apt_ensure WHAT PKG...: installs the packages not installed yet (as root), or exits saying
# what to install.
apt_ensure() {
  local what=$1 p
  shift
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    log "missing Debian packages for $what: ${missing[*]}"
    log "run as root, or install them yourself: sudo apt-get install -y --no-install-recommends ${missing[*]}"
    exit 1
  fi
  log "installing $what: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

APT_PKGS=(
  # Debian route for the eBPF build: rustc 1.96 on LLVM 22 + prebuilt core for bpfel-unknown-none.
  rustc-web libstd-rust-web-dev-bpf
  # Its clippy lints the eBPF crate for bpfel-unknown-none (`cargo xtask test`).
  rust-web-clippy
  # bpf-linker builds against Debian's LLVM 22.
  llvm-22-dev libpolly-22-dev libzstd-dev zlib1g-dev
  # Tests: real filesystems, workloads, witnesses.
  xfsprogs e2fsprogs btrfs-progs fio fsmark prometheus bpftool util-linux fdisk curl blktrace
  # `observer top` is driven in a terminal multiplexer (tests/top.rs).
  tmux
)

apt_ensure "the build and the tests" "${APT_PKGS[@]}"

BPF_LINKER_VERSION=0.13.0
if ! command -v bpf-linker >/dev/null 2>&1 || ! bpf-linker --version 2>/dev/null | grep -q "$BPF_LINKER_VERSION"; then
  log "installing bpf-linker $BPF_LINKER_VERSION against /usr/lib/llvm-22 (about a minute)"
  LLVM_PREFIX=/usr/lib/llvm-22 LLVM_SYS_221_PREFIX=/usr/lib/llvm-22 \
    cargo install --locked bpf-linker --version "$BPF_LINKER_VERSION" --no-default-features --features llvm-22 \
    || { log "bpf-linker build failed; it needs llvm-22-dev libpolly-22-dev libzstd-dev zlib1g-dev"; exit 1; }
fi
log "toolchain ready: $(/usr/bin/rustc --version), $(bpf-linker --version)"

# ---------------------------------------------------------------------------------------------
# Operations tooling (issue #5): real Prometheus for the dashboard test, systemd-analyze for the
# unit checks, strace (syscall audit of the unit's SystemCallFilter), and kubernetes-validate
# (PyPI) in a venv of our own for the DaemonSet check. Tests look for it at
# /opt/blkobs-tools/venv/bin/kubernetes-validate (override: KUBERNETES_VALIDATE=/path).
OPS_APT_PKGS=(prometheus systemd python3-venv python3-pip strace bpftool fio util-linux)
apt_ensure "operations tooling" "${OPS_APT_PKGS[@]}"
KV_VERSION=1.37.0
KV_VENV=/opt/blkobs-tools/venv
if ! "$KV_VENV/bin/kubernetes-validate" --version 2>/dev/null | grep -q "$KV_VERSION"; then
  log "installing kubernetes-validate $KV_VERSION into $KV_VENV"
  /usr/bin/python3 -m venv "$KV_VENV"
  "$KV_VENV/bin/pip" install -q "kubernetes-validate==$KV_VERSION" \
    || { log "pip install kubernetes-validate failed: check access to PyPI"; exit 1; }
fi
# schemathesis (PyPI) validates the OpenAPI document against the real API (tests/stalls.rs).
ST_VERSION=4.32.5
if ! "$KV_VENV/bin/st" --version 2>/dev/null | grep -q "$ST_VERSION"; then
  log "installing schemathesis $ST_VERSION into $KV_VENV"
  "$KV_VENV/bin/pip" install -q "schemathesis==$ST_VERSION" \
    || { log "pip install schemathesis failed: check access to PyPI"; exit 1; }
fi
log "operations tooling ready: $(prometheus --version 2>&1 | head -1), $(systemd-analyze --version | head -1), kubernetes-validate $("$KV_VENV/bin/kubernetes-validate" --version 2>&1)"

# ---------------------------------------------------------------------------------------------
# Kernel matrix (`cargo xtask vmtest`, xtask/src/vm.rs): boots Debian's own 5.10 / 6.1 / 6.12 cloud
# kernels in qemu (TCG) with this host's root filesystem shared read-only over virtiofs
# (virtiofsd ships with qemu-system-common, a dependency of qemu-system-x86).
# qemu-system-x86 boots them, busybox-static + cpio make the initramfs, kmod runs depmod on the
# host and modprobe in the guest, dpkg/apt (always present) download and unpack the packages.
VM_APT_PKGS=(qemu-system-x86 busybox-static cpio kmod xz-utils gzip iproute2
  # Disk stacks the guests build on their disks (md, LVM, dm-crypt, thin pools).
  mdadm lvm2 cryptsetup-bin thin-provisioning-tools)
apt_ensure "the kernel matrix" "${VM_APT_PKGS[@]}"
log "kernel-matrix tooling ready: $(qemu-system-x86_64 --version | head -1)"

# A Debian machine with systemd as PID 1 (`cargo xtask machine`, xtask/src/machine.rs): the image
# is made by mmdebstrap from Debian's packages, the run's disk is a qcow2 overlay (qemu-utils), the
# package under test is built by cargo-deb from observer/Cargo.toml's [package.metadata.deb].
MACHINE_APT_PKGS=(mmdebstrap qemu-utils e2fsprogs)
apt_ensure "the Debian machine" "${MACHINE_APT_PKGS[@]}"
CARGO_DEB_VERSION=3.8.0
if ! cargo deb --version 2>/dev/null | grep -q "$CARGO_DEB_VERSION"; then
  log "installing cargo-deb $CARGO_DEB_VERSION (a few minutes)"
  cargo install --locked cargo-deb --version "$CARGO_DEB_VERSION" \
    || { log "cargo install cargo-deb failed: check access to crates.io"; exit 1; }
fi
log "machine tooling ready: $(mmdebstrap --version), $(cargo deb --version)"

# Tests read tracefs (the ftrace witness, tracepoint lists); a fresh machine has it unmounted.
if [ "$(id -u)" -eq 0 ] && ! mountpoint -q /sys/kernel/tracing 2>/dev/null; then
  mount -t tracefs tracefs /sys/kernel/tracing && log "mounted tracefs at /sys/kernel/tracing"
fi
