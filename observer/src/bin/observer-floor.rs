//! `observer-floor`: attaches empty `tp_btf` programs to exactly the tracepoints the observer
//! uses on this kernel, then waits for SIGINT/SIGTERM. The "floor" configuration of
//! `cargo xtask bench` (BENCHMARKS.md): the cost of being attached at all, against which the
//! observer's own work is measured. Not needed to run the observer.

use anyhow::{Context, Result};
use aya::{programs::BtfTracePoint, Btf, EbpfLoader};

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/floor.bpf.o"));

/// (program, tracepoint), in the observer's attach order (src/probes.rs). The first entry point
/// that the kernel has wins: block_io_start (Linux ≥ 6.5), else block_rq_insert.
const PLAN: [(&str, &str); 6] = [
    ("f_rq_complete", "block_rq_complete"),
    ("f_rq_requeue", "block_rq_requeue"),
    ("f_rq_merge", "block_rq_merge"),
    ("f_bio_back", "block_bio_backmerge"),
    ("f_bio_front", "block_bio_frontmerge"),
    ("f_rq_issue", "block_rq_issue"),
];

fn attach(ebpf: &mut aya::Ebpf, btf: &Btf, name: &str, tp: &str) -> Result<()> {
    let prog: &mut BtfTracePoint =
        ebpf.program_mut(name).with_context(|| format!("no program {name}"))?.try_into()?;
    prog.load(tp, btf).with_context(|| format!("loading {name} for {tp}"))?;
    prog.attach().with_context(|| format!("attaching {name} to {tp}"))?;
    Ok(())
}

fn main() -> Result<()> {
    let btf = Btf::from_sys_fs().context("reading kernel BTF")?;
    let mut ebpf = EbpfLoader::new().btf(Some(&btf)).load(OBJECT).context("loading the floor object")?;
    for (name, tp) in PLAN {
        attach(&mut ebpf, &btf, name, tp)?;
    }
    let enter = match attach(&mut ebpf, &btf, "f_io_start", "block_io_start") {
        Ok(()) => "block_io_start",
        Err(_) => {
            attach(&mut ebpf, &btf, "f_rq_insert", "block_rq_insert")?;
            "block_rq_insert"
        }
    };
    // Block the signals first, so none is lost between "ready" and sigwait.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        println!("ready: {} empty tp_btf programs attached (enter = {enter}); pid {}", PLAN.len() + 1, std::process::id());
        use std::io::Write;
        std::io::stdout().flush().ok();
        let mut sig = 0;
        libc::sigwait(&set, &mut sig);
    }
    drop(ebpf);
    Ok(())
}
