//! The bio-based disk protocol (dm, md, NVMe multipath heads: disks whose I/Os are bios),
//! as pure decisions: README "What is one I/O of a bio-based disk" is the rule, and
//! docs/design/stacked-disks.md lists the kernel facts (F1..) the decisions rely on.
//!
//! Each decision in [`decide`] models what observer-ebpf does today for one event (inflight.rs
//! `enter_bio`, `tracked_parent`, `piece_of`; chain.rs `link`, `fold`, `unlink`;
//! probes/bio_split.rs, bio_remap.rs, bio_complete.rs): it takes what the program read and the
//! map values it looked up ([`types`]), and returns the map operations and counts to apply, in
//! order ([`types::Plan`]). The programs do not call it yet; the simulator (`sim`, tests only)
//! applies the plans to in-memory maps under generated kernel event orders.
pub mod decide;
pub mod types;

#[cfg(test)]
mod sim;
