//! What was slow, what is stuck right now, and stall episodes: the domain behind `/stalls`
//! and `/inflight`.
//!
//! Sources: slow requests and ended stall episodes arrive from the kernel through the `EVENTS`
//! ring buffer ([`crate::collect::events::History`]); requests in flight and ongoing episodes
//! are read from `INFLIGHT` and `DEVSTATE` at query time. All kernel times are CLOCK_MONOTONIC
//! ns; [`crate::time::Clock`] turns them into wall-clock times for display.

pub mod file;
pub mod inflight;
pub mod records;
pub mod report;
pub mod text;

pub use inflight::inflight;
pub use records::{Episode, Filter, InflightRequest, SlowRequest, StallReport, Submitter};
pub use report::{report, ReportInput};
pub use text::render_text;
