//! `observer-floor`: attaches empty `tp_btf` programs to exactly the tracepoints the observer
//! uses on this kernel, then waits for SIGINT/SIGTERM. The "floor" configuration of
//! `cargo xtask bench` (BENCHMARKS.md): the cost of being attached at all, against which the
//! observer's own work is measured. Not needed to run the observer.
//!
//! `observer-floor --costs` instead attaches one program per building block of the observer's
//! programs to block_rq_issue (observer-ebpf/src/costs.rs), for `cargo xtask bench --costs`.

use anyhow::{Context, Result};
use aya::{programs::BtfTracePoint, Btf, EbpfLoader};
use observer::bpf::{
    btf::{KernelBtf, VMLINUX_BTF},
    tracepoints::{ENTER, ENTER_FALLBACK, LIFECYCLE},
};

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/floor.bpf.o"));
static COSTS: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/costs.bpf.o"));

/// Programs of costs.rs, in attach (= run) order: the hash insert runs before its lookup and delete.
const COST_PROGRAMS: [&str; 16] = [
    "c00_empty",
    "c01_ktime",
    "c02_layout_copy",
    "c03_pread_1",
    "c04_pread_5",
    "c05_direct_5",
    "c06_hash_insert",
    "c07_hash_lookup",
    "c08_hash_delete",
    "c09_pcpu_lookup",
    "c10_pcpu_hist3",
    "c11_counter",
    "c11b_slot_lookup",
    "c11c_submitter",
    "c11d_stateless",
    "c12_empty_last",
];

fn costs() -> Result<aya::Ebpf> {
    let layout = KernelBtf::from_file(VMLINUX_BTF)?.kernel_layout()?;
    let btf = Btf::from_sys_fs().context("reading kernel BTF")?;
    let mut ebpf = EbpfLoader::new()
        .btf(Some(&btf))
        .override_global("LAYOUT", &layout, true)
        .load(COSTS)
        .context("loading the costs object")?;
    let mut n = 0;
    for name in COST_PROGRAMS {
        // A block the verifier refuses on this kernel is reported and skipped.
        match attach(&mut ebpf, &btf, name, "block_rq_issue") {
            Ok(()) => n += 1,
            Err(e) => eprintln!("{name}: {e:#}"),
        }
    }
    println!(
        "ready: {n} cost programs attached to block_rq_issue; pid {}",
        std::process::id()
    );
    Ok(ebpf)
}

/// Loads program `name` of `ebpf` as `tp_btf` for tracepoint `tp` and attaches it.
fn attach(ebpf: &mut aya::Ebpf, btf: &Btf, name: &str, tp: &str) -> Result<()> {
    let prog: &mut BtfTracePoint = ebpf
        .program_mut(name)
        .with_context(|| format!("no program {name}"))?
        .try_into()?;
    prog.load(tp, btf)
        .with_context(|| format!("loading {name} for {tp}"))?;
    prog.attach()
        .with_context(|| format!("attaching {name} to {tp}"))?;
    Ok(())
}

fn main() -> Result<()> {
    if std::env::args().nth(1).as_deref() == Some("--costs") {
        let ebpf = costs()?;
        wait_for_signal();
        drop(ebpf);
        return Ok(());
    }
    let btf = Btf::from_sys_fs().context("reading kernel BTF")?;
    let mut ebpf = EbpfLoader::new()
        .btf(Some(&btf))
        .load(OBJECT)
        .context("loading the floor object")?;
    // The observer's attach order (observer::bpf::tracepoints); the first entry point that the
    // kernel has wins: block_io_start (Linux ≥ 6.5), else block_rq_insert.
    for t in LIFECYCLE {
        attach(&mut ebpf, &btf, t.floor_program, t.name)?;
    }
    let enter = match attach(&mut ebpf, &btf, ENTER.floor_program, ENTER.name) {
        Ok(()) => ENTER.name,
        Err(_) => {
            attach(
                &mut ebpf,
                &btf,
                ENTER_FALLBACK.floor_program,
                ENTER_FALLBACK.name,
            )?;
            ENTER_FALLBACK.name
        }
    };
    println!(
        "ready: {} empty tp_btf programs attached (enter = {enter}); pid {}",
        LIFECYCLE.len() + 1,
        std::process::id()
    );
    wait_for_signal();
    drop(ebpf);
    Ok(())
}

/// Waits for SIGINT or SIGTERM. (A signal that arrives before this is reached still ends the
/// process through the default action, with the same effect: the programs detach.)
fn wait_for_signal() {
    use std::io::Write;
    std::io::stdout().flush().ok();
    // SAFETY: a zeroed sigset_t is a valid argument to sigemptyset, which initialises it;
    // the calls only read and write `set` and this thread's signal mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let mut sig = 0;
        libc::sigwait(&set, &mut sig);
    }
}
