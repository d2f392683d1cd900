//! Placeholder for the kernel-matrix test, run inside Debian's 5.10 / 6.1 / 6.12 kernels by
//! `cargo xtask vmtest` (BLKOBS_VM=1, BLKOBS_VM_KERNEL=<label>). Not part of the host suite
//! (`test = false` in Cargo.toml); build it with `cargo test -p observer --test matrix --no-run`.

#[test]
fn kernel_is_up() {
    let uname = std::process::Command::new("uname").arg("-r").output().expect("uname");
    println!(
        "matrix: kernel {} (BLKOBS_VM_KERNEL={:?})",
        String::from_utf8_lossy(&uname.stdout).trim(),
        std::env::var("BLKOBS_VM_KERNEL").ok()
    );
    let stats = std::fs::read_to_string("/proc/diskstats").expect("/proc/diskstats readable");
    assert!(!stats.is_empty(), "/proc/diskstats is empty");
}
