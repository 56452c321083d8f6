//! `Rate`: calls per second and a burst — the one type for a tool's rate,
//! which the tools file gives (`tools::rate` reads it) and the store's token
//! bucket enforces (`store::limits` refills it). A leaf of the crate: it
//! imports nothing of it.

/// Calls per second, and the bucket's size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Above 0 (fractions allowed: 0.5 is one call every two seconds).
    pub per_second: f64,
    /// At least 1: how many calls may start at once after a quiet spell.
    pub burst: u32,
}
