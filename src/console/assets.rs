//! The console's files, compiled into the binary: each with the name it is
//! served under (after `/ui/`) and its `Content-Type`. The sources are the
//! files under `src/console/assets/`, served as they are (no build step).
//!
//! This table is the whole of what `/ui` can serve: nothing is read from
//! the disk at run time.

/// One file of the console.
pub struct Asset {
    /// The path after `/ui/`.
    pub name: &'static str,
    pub content_type: &'static str,
    pub body: &'static [u8],
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const SVG: &str = "image/svg+xml";

macro_rules! asset {
    ($name:literal, $content_type:expr) => {
        Asset {
            name: $name,
            content_type: $content_type,
            body: include_bytes!(concat!("assets/", $name)),
        }
    };
}

/// Every file `/ui` serves.
pub const ASSETS: &[Asset] = &[
    asset!("index.html", HTML),
    asset!("app.css", CSS),
    asset!("favicon.svg", SVG),
    asset!("app.js", JS),
    asset!("js/api.js", JS),
    asset!("js/dom.js", JS),
    asset!("js/format.js", JS),
    asset!("js/chart.js", JS),
    asset!("js/poll.js", JS),
    asset!("js/timezone.js", JS),
    asset!("js/bulk.js", JS),
    asset!("js/rerun.js", JS),
    asset!("js/auth.js", JS),
    asset!("js/overview.js", JS),
    asset!("js/calls.js", JS),
    asset!("js/search.js", JS),
    asset!("js/call.js", JS),
    asset!("js/timeline.js", JS),
    asset!("js/tools.js", JS),
    asset!("js/verify.js", JS),
    asset!("js/approvals.js", JS),
];
