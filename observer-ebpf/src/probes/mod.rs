//! One file per block tracepoint: the handler and its entry programs. Each file pins the
//! tracepoint's prototype (include/trace/events/block.h). Before Linux 5.11 the request
//! tracepoints took the queue first, `(struct request_queue *q, struct request *rq)`, and the
//! bio merge ones `(q, rq, bio)`; the `*_q` programs read that layout, and the daemon picks the
//! pair that matches the tracepoint's BTF arguments (observer/src/kernel_layout.rs).
mod bio_merge;
mod io_start;
mod rq_complete;
mod rq_insert;
mod rq_issue;
mod rq_merge;
mod rq_requeue;
