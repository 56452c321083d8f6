//! The operator's metrics, beside the service's (`service`): which tools
//! are paused, how many calls operators re-ran, how many calls bulk jobs
//! acted on. Registered into the same registry, rendered in the same scrape.
//!
//! Label values are tool names from the tools file, as for the other tool
//! families; nothing else becomes a label.

use super::registry::Registry;
use super::series::{Counter, Family, Gauge};
use std::sync::Arc;

pub const TOOL_PAUSED: &str = "idempotent_tool_tool_paused";
pub const RERUNS: &str = "idempotent_tool_reruns_total";
pub const BULK_CALLS: &str = "idempotent_tool_bulk_calls_total";

/// The operator's families.
pub struct OperatorMetrics {
    /// 1 while a tool is paused (for every process), else 0.
    tool_paused: Arc<Family<Gauge>>,
    /// Calls sent back to `pending` by a re-run (one, or a bulk job's).
    pub reruns: Arc<Counter>,
    /// Calls a bulk job processed here (changed or left as they were).
    pub bulk_calls: Arc<Counter>,
}

impl OperatorMetrics {
    pub(super) fn new(r: &Registry) -> OperatorMetrics {
        OperatorMetrics {
            tool_paused: r.gauge_family(
                TOOL_PAUSED,
                "1 while the tool is paused: its calls are accepted and wait, none is claimed.",
                &["tool"],
            ),
            reruns: r.counter(
                RERUNS,
                "Failed or cancelled calls sent back to pending by a re-run (alone or in a bulk job).",
            ),
            bulk_calls: r.counter(
                BULK_CALLS,
                "Calls bulk jobs worked by this process processed (changed or left as they were).",
            ),
        }
    }

    /// A tool's series, at 0 until it is paused.
    pub(super) fn declare_tool(&self, tool: &str) {
        self.tool_paused.with(&[tool]);
    }

    /// The paused tools now are exactly `paused`.
    pub fn set_paused_tools(&self, paused: &[String]) {
        for tool in paused {
            self.tool_paused.with(&[tool]);
        }
        for (labels, gauge) in self.tool_paused.children() {
            let on = labels.first().is_some_and(|tool| paused.contains(tool));
            gauge.set(if on { 1.0 } else { 0.0 });
        }
    }
}
