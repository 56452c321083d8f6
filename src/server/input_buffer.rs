//! A connection's input buffer, reused across the requests of one connection.
//!
//! This file owns where received bytes live until the parser uses them. It must
//! never grow without bound (the parser consumes whole units as they arrive, so
//! the unread part stays within the head and line limits) and never keep a large
//! buffer after the one request that needed it.

use std::io::{self, Read};

/// A buffer that grew past this for one big request is given back afterwards.
pub(super) const RETAINED_BUFFER: usize = 64 * 1024;
const INITIAL_BUFFER: usize = 8 * 1024;
const MIN_READ_ROOM: usize = 4 * 1024;

/// A connection's read buffer: bytes in `data[start..end]` are received but not
/// yet used by the parser. Reused across requests so the fast path allocates
/// nothing for input.
pub(super) struct InputBuffer {
    data: Vec<u8>,
    start: usize,
    end: usize,
}

impl InputBuffer {
    pub(super) fn new() -> Self {
        InputBuffer {
            data: vec![0; INITIAL_BUFFER],
            start: 0,
            end: 0,
        }
    }

    pub(super) fn unread(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    pub(super) fn is_empty(&self) -> bool {
        self.start == self.end
    }

    pub(super) fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.clear();
        }
    }

    pub(super) fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }

    /// Stray CRLFs between requests (some clients add one after a body) are not
    /// the start of a request, so they must not start the request deadline.
    pub(super) fn discard_leading_newlines(&mut self) {
        let n = self
            .unread()
            .iter()
            .take_while(|&&b| b == b'\r' || b == b'\n')
            .count();
        self.consume(n);
    }

    /// One `read` into free space at the end. The parser consumes bytes as soon as
    /// they form something whole, so the unread part stays within the head and
    /// line limits and the buffer cannot grow without bound.
    pub(super) fn read_from(&mut self, reader: &mut impl Read) -> io::Result<usize> {
        self.make_room();
        let n = reader.read(&mut self.data[self.end..])?;
        self.end += n;
        Ok(n)
    }

    fn make_room(&mut self) {
        if self.data.len() - self.end >= MIN_READ_ROOM {
            return;
        }
        if self.start > 0 {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.data.len() - self.end < MIN_READ_ROOM {
            let grown = (self.data.len() * 2).max(self.end + MIN_READ_ROOM);
            self.data.resize(grown, 0);
        }
    }

    pub(super) fn shrink_if_large(&mut self) {
        let unread = self.end - self.start;
        if self.data.len() <= RETAINED_BUFFER || unread > INITIAL_BUFFER / 2 {
            return;
        }
        let mut fresh = vec![0; INITIAL_BUFFER];
        fresh[..unread].copy_from_slice(self.unread());
        self.data = fresh;
        self.start = 0;
        self.end = unread;
    }
}
