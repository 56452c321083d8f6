//! The one lock helper of the whole crate. A panic while a lock is held (a
//! bug in a handler, caught by the server) must not take every later request
//! down with it: the data behind our locks stays consistent between
//! statements, so a poisoned lock is taken as it is.

use std::sync::{Mutex, MutexGuard};

/// Lock `mutex`, ignoring poisoning (see the module doc).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
