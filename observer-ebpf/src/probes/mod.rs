//! One file per block tracepoint: the handler and its entry programs. Each file pins the
//! tracepoint's prototype (include/trace/events/block.h). Before Linux 5.11 (and 5.10.137) the
//! request tracepoints of the `block_rq` class took the queue first,
//! `(struct request_queue *q, struct request *rq)`, and the bio merge ones `(q, rq, bio)`; the
//! `*_q` programs read that layout. The daemon picks, per tracepoint, the pair that matches the
//! `btf_trace_<name>` prototype in kernel BTF (observer/src/bpf/btf.rs, `ArgLayout`).
mod bio_complete;
mod bio_merge;
pub mod bio_queue;
mod bio_remap;
mod bio_split;
mod io_start;
mod rq_complete;
mod rq_insert;
mod rq_issue;
mod rq_merge;
mod rq_requeue;
