//! The reaper's question to the kernel: is this `struct request` in flight? A one-program
//! object (observer-ebpf/src/reqstate.rs), loaded beside the attached programs and never
//! attached: each question is one BPF_PROG_TEST_RUN of a raw_tp program (Linux 5.10+) with the
//! request's address as its argument; the answer is the request's `state`.

use aya::maps::Array;
use aya::{
    programs::{RawTracePoint, RawTracePointRunOptions, TestRun},
    Ebpf, EbpfLoader,
};
use observer_common::{
    layout::KernelLayout,
    maps::{FileInfo, FILE_INFO},
};

use super::loader::{load_err, ProbeError};

/// The object built by build.rs from observer-ebpf/src/reqstate.rs.
pub(crate) static OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/reqstate.bpf.o"));

/// Set in the program's result while the request is inside a flush sequence.
const IN_FLUSH_SEQ: u32 = 1 << 8;

/// The program's name in the object.
const PROGRAM: &str = "rq_state";
/// The file lookup's program (observer-ebpf/src/reqstate.rs `file_of`).
const FILE_PROGRAM: &str = "file_of";

/// What [`RequestProbe::file`] asks about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileQuery {
    /// A `struct request *` in flight (the key of its `INFLIGHT` entry).
    Request(u64),
    /// A `struct bio *` in flight on a bio-based disk.
    Bio(u64),
    /// The inode at this kernel address, which a slow event named, if it still holds this inode
    /// number.
    Inode(u64, u64),
}

/// What the kernel says of a request (`enum mq_rq_state`, include/linux/blk-mq.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestState {
    /// MQ_RQ_IN_FLIGHT: started by blk_mq_start_request (dispatched to the driver) and not yet
    /// completed: the driver or the device has it, however long that takes.
    InFlight,
    /// Inside a flush sequence (RQF_FLUSH_SEQ, or `end_io` set on kernels whose BTF lacks the
    /// flag): e.g. a FUA write whose data part is done waits, COMPLETE, for its post-flush.
    InFlushSequence,
    /// MQ_RQ_IDLE or MQ_RQ_COMPLETE: not (or no longer) at the driver — freed, requeued,
    /// completing, or reused and not yet dispatched.
    NotInFlight,
    /// The struct could not be read (its device and tag set went away).
    Unreadable,
}

/// Loads the raw_tp program `name` of `ebpf` (not attached: run with test runs).
fn load_program(ebpf: &mut Ebpf, name: &str) -> Result<(), ProbeError> {
    let what = format!("finding {name}");
    let prog: &mut RawTracePoint = ebpf
        .program_mut(name)
        .ok_or_else(|| load_err(what.clone())(anyhow::anyhow!("missing from object")))?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| load_err(what.clone())(e.into()))?;
    prog.load()
        .map_err(|e| load_err(&format!("loading {name}"))(e.into()))
}

/// The loaded probe. Dropping it unloads the program.
pub struct RequestProbe {
    ebpf: Ebpf,
    /// Held from a `file_of` run to the read of its `FILE_INFO` result.
    file_lock: std::sync::Mutex<()>,
    /// Whether `file_of` loaded.
    files: bool,
    /// The value of MQ_RQ_IN_FLIGHT in this kernel's BTF.
    in_flight: u32,
}

impl RequestProbe {
    /// Loads the program with `loader` (the daemon's one loader: each `EbpfLoader::new()`
    /// parses all of vmlinux BTF, see `loader::object_loader`), the kernel layout
    /// (`request::state` offset; `direct_loads` must be 0: the program is raw_tp and reads
    /// struct fields with bpf_probe_read_kernel) and the value of MQ_RQ_IN_FLIGHT from kernel
    /// BTF. Errors if the kernel refuses the program.
    pub fn load<'a>(
        loader: &mut EbpfLoader<'a>,
        layout: &'a KernelLayout,
        in_flight: u32,
    ) -> Result<RequestProbe, ProbeError> {
        debug_assert_eq!(layout.direct_loads, 0, "the request-state probe is raw_tp");
        let mut ebpf = loader
            .override_global("LAYOUT", layout, true)
            .load(OBJECT)
            .map_err(|e| load_err("loading the request-state probe")(e.into()))?;
        load_program(&mut ebpf, PROGRAM)?;
        // Without the file lookup the reaper still works: files are then unknown.
        let files = load_program(&mut ebpf, FILE_PROGRAM)
            .inspect_err(|e| {
                tracing::warn!(error = %format!("{e:#}"), "the file of stuck requests and the path of slow ones are unknown")
            })
            .is_ok();
        Ok(RequestProbe {
            ebpf,
            file_lock: std::sync::Mutex::new(()),
            files,
            in_flight,
        })
    }

    /// Run count and run time of the probe's program (see [`super::progstats`]).
    pub fn program_runs(&self) -> Vec<super::progstats::ProgramRun> {
        super::progstats::program_runs(&self.ebpf)
    }

    /// One test run of program `name` (loaded in [`RequestProbe::load`]): its return value.
    fn run(
        &self,
        name: &str,
        opts: RawTracePointRunOptions,
    ) -> Result<u32, aya::programs::ProgramError> {
        let prog: &RawTracePoint = self
            .ebpf
            .program(name)
            .expect("loaded in RequestProbe::load")
            .try_into()?;
        Ok(prog.test_run(opts)?.return_value)
    }

    /// The state of the `struct request` at kernel address `rq`. Errors if the test run fails
    /// (e.g. BPF_PROG_TEST_RUN refused): then nothing is known.
    pub fn state(&self, rq: u64) -> Result<RequestState, aya::programs::ProgramError> {
        let mut opts = RawTracePointRunOptions::new();
        opts.args[0] = rq;
        let v = self.run(PROGRAM, opts)?;
        Ok(if v == u32::MAX {
            RequestState::Unreadable
        } else if v & IN_FLUSH_SEQ != 0 {
            RequestState::InFlushSequence
        } else if v == self.in_flight {
            RequestState::InFlight
        } else {
            RequestState::NotInFlight
        })
    }

    /// The file an I/O carries and its path, leaf first (observer-ebpf/src/reqstate.rs
    /// `file_of`: at most 8 names of up to 63 bytes). Runs the program once (a few µs) under a
    /// lock. Errors if the test run or the map read fails.
    pub fn file(&self, q: FileQuery) -> anyhow::Result<FileInfo> {
        anyhow::ensure!(self.files, "{FILE_PROGRAM} is not loaded");
        let mut opts = RawTracePointRunOptions::new();
        opts.args[..4].copy_from_slice(&match q {
            FileQuery::Request(rq) => [rq, 0, 0, 0],
            FileQuery::Bio(bio) => [bio, 1, 0, 0],
            FileQuery::Inode(inode, ino) => [0, 0, inode, ino],
        });
        let _held = self.file_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.run(FILE_PROGRAM, opts)?;
        let map: Array<_, FileInfo> = Array::try_from(
            self.ebpf
                .map(FILE_INFO)
                .ok_or_else(|| anyhow::anyhow!("{FILE_INFO} missing from the object"))?,
        )?;
        Ok(map.get(&0, 0)?)
    }
}
