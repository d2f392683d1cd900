//! The one table of block tracepoints the observer attaches to, with the names of the programs
//! (observer-ebpf) and of the empty "floor" programs (observer-ebpf `floor.rs`) for each.

/// A block tracepoint and the programs attached to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tracepoint {
    /// Tracepoint name (include/trace/events/block.h), e.g. `block_rq_complete`.
    pub name: &'static str,
    /// Base name of the observer's program: `<program>` is the `tp_btf` variant, `<program>_q`
    /// the one for the older `(struct request_queue *, ...)` argument layout, and `_raw` appended
    /// the `raw_tp` variant.
    pub program: &'static str,
    /// The empty `tp_btf` program of the floor object (`observer-floor`).
    pub floor_program: &'static str,
}

const fn tp(name: &'static str, program: &'static str, floor_program: &'static str) -> Tracepoint {
    Tracepoint {
        name,
        program,
        floor_program,
    }
}

/// The tracepoints every kernel has, in attach order: from the end of a request's life to its
/// start, so every request that gets an entry is sure to be seen at dispatch and completion.
/// The entry point ([`ENTER`] or [`ENTER_FALLBACK`]) is attached last, right after
/// `block_bio_queue` (a bio's entry, btt Q: where the queue stage starts).
pub const LIFECYCLE: [Tracepoint; 12] = [
    tp("block_bio_complete", "bio_complete", "f_bio_complete"),
    // Each completion tracepoint again, right after its program: the ends the kernel skipped
    // that program for, as it was running on that CPU (observer-ebpf nested.rs).
    tp(
        "block_bio_complete",
        "bio_complete_nested",
        "f_bio_compl_nst",
    ),
    tp("block_rq_complete", "rq_complete", "f_rq_complete"),
    tp("block_rq_complete", "rq_complete_nested", "f_rq_compl_nst"),
    tp("block_rq_requeue", "rq_requeue", "f_rq_requeue"),
    tp("block_rq_merge", "rq_merge", "f_rq_merge"),
    tp("block_bio_backmerge", "bio_backmerge", "f_bio_back"),
    tp("block_bio_frontmerge", "bio_frontmerge", "f_bio_front"),
    tp("block_rq_issue", "rq_issue", "f_rq_issue"),
    tp("block_bio_remap", "bio_remap", "f_bio_remap"),
    tp("block_split", "bio_split", "f_bio_split"),
    tp("block_bio_queue", "bio_queue", "f_bio_queue"),
];

/// A program the kernel runs by tail call from an attached one, instead of from an attachment
/// of its own: every attachment costs a trampoline call on each event of its tracepoint (51 ns
/// per request for an empty program on `block_rq_complete` on the project's machine:
/// BENCHMARKS.md), and this kind of program has work only now and then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TailCall {
    /// The tracepoint of both programs (their argument layout is the same).
    pub tracepoint: &'static str,
    /// Base name of the program that tail-calls (one of [`LIFECYCLE`]'s).
    pub caller: &'static str,
    /// Base name of the program it continues as (variants named as [`Tracepoint::program`]'s).
    pub program: &'static str,
    /// The `BPF_MAP_TYPE_PROG_ARRAY` whose element 0 the daemon sets to [`Self::program`]
    /// before anything is attached.
    pub map: &'static str,
}

/// The tail calls: `rq_complete_nested` ends remapped bios of bio-based disks as
/// `rq_complete_remapped` while any is live (observer-ebpf probes/bio_remap.rs).
pub const TAIL_CALLS: [TailCall; 1] = [TailCall {
    tracepoint: "block_rq_complete",
    caller: "rq_complete_nested",
    program: "rq_complete_remapped",
    map: "RQ_COMPLETE_TAIL",
}];

/// Whether `program` (an object's name: base, `_q`, `_raw` variants) is one of [`TAIL_CALLS`]'
/// targets: loaded, never attached, its runs and time counted in its caller's numbers.
pub fn is_tail_called(program: &str) -> bool {
    TAIL_CALLS.iter().any(|t| {
        program
            .strip_prefix(t.program)
            .is_some_and(|v| ["", "_q", "_raw", "_q_raw"].contains(&v))
    })
}

/// Where a request enters the block layer: `block_io_start` (block/blk-core.c,
/// `blk_account_io_start`; Linux ≥ 6.5), where PREFLUSH/FUA are still set.
pub const ENTER: Tracepoint = tp("block_io_start", "io_start", "f_io_start");

/// The entry point on kernels without `block_io_start` (< 6.5): `block_rq_insert`; directly
/// issued requests then enter at `block_rq_issue` (queue time 0).
pub const ENTER_FALLBACK: Tracepoint = tp("block_rq_insert", "rq_insert", "f_rq_insert");

/// The tracepoints to attach to, in order: [`LIFECYCLE`], then the entry point this kernel has.
pub fn attach_order(enter_fallback: bool) -> Vec<Tracepoint> {
    let mut plan = LIFECYCLE.to_vec();
    plan.push(if enter_fallback {
        ENTER_FALLBACK
    } else {
        ENTER
    });
    plan
}
