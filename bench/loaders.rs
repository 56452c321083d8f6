//! The runs that load rows straight into a database file (`--sweep`,
//! `--console list`, `--console writes`): they need the library's bulk
//! loaders, which only a build with the `testing` feature contains, so the
//! service's release binary never does. Without it each says how to run it,
//! and every other mode of `cargo run --release --bin bench` works as is.

use crate::error::BenchError;
use crate::Config;

/// What a build without the loaders answers for a run that needs them.
#[cfg(not(feature = "testing"))]
const NEEDS_LOADERS: &str = "--sweep, --console list and --console writes load rows straight into \
     a database file, which only a bench built with its loaders can: \
     cargo run --release --features testing --bin bench -- …";

/// `--sweep`.
pub fn run_sweep(config: &Config) -> Result<bool, BenchError> {
    #[cfg(feature = "testing")]
    return crate::sweep::run_sweep(config);
    #[cfg(not(feature = "testing"))]
    {
        let _ = config;
        Err(BenchError::Usage(NEEDS_LOADERS))
    }
}

/// `--console list`.
pub fn run_list_latency(config: &Config) -> Result<bool, BenchError> {
    #[cfg(feature = "testing")]
    return crate::list_latency::run_list_latency(config);
    #[cfg(not(feature = "testing"))]
    {
        let _ = config;
        Err(BenchError::Usage(NEEDS_LOADERS))
    }
}

/// `--console writes`.
pub fn run_write_comparison(config: &Config) -> Result<bool, BenchError> {
    #[cfg(feature = "testing")]
    return crate::console_load::run_write_comparison(config);
    #[cfg(not(feature = "testing"))]
    {
        let _ = config;
        Err(BenchError::Usage(NEEDS_LOADERS))
    }
}
