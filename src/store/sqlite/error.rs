//! How a SQLite error becomes a `StoreError`: what may pass with time (busy,
//! locked, full, read-only, failing I/O, cannot open, out of memory) is
//! `Unavailable`, the rest `Internal`; the `rusqlite` error stays reachable
//! as the `source()`. It decides nothing else.

use super::super::error::{Cause, StoreError};
use rusqlite::ErrorCode;

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> StoreError {
        let transient = matches!(
            e.sqlite_error_code(),
            Some(
                ErrorCode::DatabaseBusy
                    | ErrorCode::DatabaseLocked
                    | ErrorCode::DiskFull
                    | ErrorCode::ReadOnly
                    | ErrorCode::SystemIoFailure
                    | ErrorCode::CannotOpen
                    | ErrorCode::OutOfMemory
            )
        );
        let cause = Cause::with_source(e.to_string(), e);
        if transient {
            StoreError::Unavailable(cause)
        } else {
            StoreError::Internal(cause)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    #[test]
    fn a_sqlite_error_stays_reachable_as_the_source() {
        let e = StoreError::from(rusqlite::Error::InvalidQuery);
        assert!(!e.is_unavailable());
        let source = e.source().expect("the rusqlite error is the source");
        assert!(source.downcast_ref::<rusqlite::Error>().is_some());
    }

    #[test]
    fn a_busy_or_full_file_is_unavailable() {
        for code in [ErrorCode::DatabaseBusy, ErrorCode::DiskFull] {
            let raw = rusqlite::ffi::Error {
                code,
                extended_code: 0,
            };
            let e = StoreError::from(rusqlite::Error::SqliteFailure(raw, None));
            assert!(e.is_unavailable(), "{code:?}");
        }
    }
}
