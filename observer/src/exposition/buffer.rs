//! [`ScrapeBuffer`]: the buffer of the last `/metrics` body, kept for the next scrape to write
//! into.
//!
//! With 32 busy disks the text exposition is ~1.9 MB. Written into a new buffer, every scrape
//! grew it by reallocation, faulted in each of its pages anew (blocks of 128 KiB and more are
//! mapped and unmapped by the allocator: `daemon::tune_allocator`) and unmapped it once sent: a
//! third of a scrape's CPU time (BENCHMARKS.md, issue 27 round two). The buffer comes back here
//! once the body is sent; the next scrape clears it and writes into pages already mapped. It
//! costs one body's size of resident memory between scrapes (every scrape held that much
//! anyway).

use std::sync::Mutex;

/// The buffer of the last exposition, once sent ([`ScrapeBuffer::put`]), for the next one
/// ([`ScrapeBuffer::take`]); empty (no capacity) while a scrape has it.
#[derive(Debug, Default)]
pub struct ScrapeBuffer(Mutex<Vec<u8>>);

impl ScrapeBuffer {
    /// The kept buffer, cleared (its capacity kept), for a writer ([`super::TextWriter`]
    /// takes it as a `String`, [`super::ProtoWriter`] with `into_bytes`); a new one while
    /// another scrape has it.
    pub fn take(&self) -> String {
        let mut buf = std::mem::take(&mut *self.0.lock().expect("scrape buffer lock"));
        buf.clear();
        String::from_utf8(buf).expect("an empty buffer is UTF-8")
    }

    /// Gives back the buffer of a sent body; of two (concurrent scrapes) the larger is kept.
    /// One much larger than the body it held (fewer disks than before) is shrunk to that body.
    pub fn put(&self, mut buf: Vec<u8>) {
        if buf.capacity() > 2 * buf.len() {
            buf.shrink_to(buf.len());
        }
        let mut kept = self.0.lock().expect("scrape buffer lock");
        if buf.capacity() > kept.capacity() {
            *kept = buf;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_the_last_buffer() {
        let b = ScrapeBuffer::default();
        let mut s = b.take();
        s.push_str(&"x".repeat(1000));
        let (cap, ptr) = (s.capacity(), s.as_ptr());
        b.put(s.into_bytes());
        let mut again = b.take();
        assert!(again.is_empty());
        assert_eq!((again.capacity(), again.as_ptr()), (cap, ptr));
        // Taken: a concurrent scrape gets a new one.
        assert_eq!(b.take().capacity(), 0);
        // Of two, the larger stays.
        again.push_str(&"x".repeat(900));
        b.put(again.into_bytes());
        b.put(b"small".to_vec());
        assert_eq!(b.take().capacity(), cap);
        // One far larger than the body it held is shrunk to it.
        let mut big = Vec::with_capacity(100_000);
        big.extend_from_slice(&[b'y'; 100]);
        b.put(big);
        assert!(b.take().capacity() < 1000);
    }
}
