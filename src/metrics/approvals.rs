//! The metric families of approval gates and their webhook: requests made,
//! decisions by outcome and source, the oldest open request's age (from the
//! scrape's database snapshot, like the oldest pending call's), and webhook
//! deliveries by outcome. The count of calls waiting is
//! `idempotent_tool_calls{status="awaiting_approval"}`, with every status.
//!
//! Label values come from this file's words and the store's fixed
//! vocabularies, never from a request.

use super::registry::Registry;
use super::series::{Counter, Family};
use super::service::DatabaseSnapshot;
use crate::lock::lock;
use crate::store::{Source, Verdict};
use std::sync::{Arc, Mutex};

pub const APPROVALS_REQUESTED: &str = "idempotent_tool_approvals_requested_total";
pub const APPROVAL_DECISIONS: &str = "idempotent_tool_approval_decisions_total";
pub const OLDEST_APPROVAL_WAIT: &str = "idempotent_tool_oldest_approval_wait_seconds";
pub const WEBHOOK_DELIVERIES: &str = "idempotent_tool_webhook_deliveries_total";

/// What one webhook delivery attempt came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// A 2xx.
    Delivered,
    /// Failed; tried again later.
    Retried,
    /// Failed for the last time: its bound was reached.
    GaveUp,
}

impl DeliveryOutcome {
    pub const ALL: [DeliveryOutcome; 3] = [
        DeliveryOutcome::Delivered,
        DeliveryOutcome::Retried,
        DeliveryOutcome::GaveUp,
    ];

    pub fn label(self) -> &'static str {
        match self {
            DeliveryOutcome::Delivered => "delivered",
            DeliveryOutcome::Retried => "retried",
            DeliveryOutcome::GaveUp => "gave_up",
        }
    }
}

/// The decisions a call's request may end with, by (decision, source).
const DECISIONS: [(Verdict, Source); 4] = [
    (Verdict::Approve, Source::Person),
    (Verdict::Deny, Source::Person),
    (Verdict::Approve, Source::Client),
    (Verdict::Deny, Source::Expiry),
];

/// The approval families of one process.
pub struct ApprovalMetrics {
    /// Calls created waiting for a decision.
    pub requested: Arc<Counter>,
    decisions: Arc<Family<Counter>>,
    deliveries: Arc<Family<Counter>>,
}

impl ApprovalMetrics {
    /// Register the families on `r`; the oldest wait's gauge reads
    /// `snapshot`, filled once per scrape.
    pub(super) fn register(
        r: &Registry,
        snapshot: Arc<Mutex<Option<DatabaseSnapshot>>>,
    ) -> ApprovalMetrics {
        let decisions = r.counter_family(
            APPROVAL_DECISIONS,
            "Approval requests decided, by decision (approved, denied) and source \
             (person, client, expiry).",
            &["decision", "source"],
        );
        for (verdict, source) in DECISIONS {
            decisions.with(&[verdict.decision(), source.as_str()]);
        }
        let deliveries = r.counter_family(
            WEBHOOK_DELIVERIES,
            "Webhook delivery attempts, by outcome (delivered, retried, gave_up).",
            &["outcome"],
        );
        for outcome in DeliveryOutcome::ALL {
            deliveries.with(&[outcome.label()]);
        }
        r.gauge_fn(
            OLDEST_APPROVAL_WAIT,
            "Age of the oldest call awaiting approval; 0 when none waits.",
            &[],
            move || match &*lock(&snapshot) {
                Some(s) => vec![(
                    vec![],
                    s.oldest_approval_wait.map_or(0.0, |a| a.as_secs_f64()),
                )],
                None => Vec::new(),
            },
        );
        ApprovalMetrics {
            requested: r.counter(
                APPROVALS_REQUESTED,
                "Calls created awaiting approval (their tool's policy held).",
            ),
            decisions,
            deliveries,
        }
    }

    /// One decision that applied.
    pub fn observe_decision(&self, verdict: Verdict, source: Source) {
        self.decisions
            .with(&[verdict.decision(), source.as_str()])
            .inc();
    }

    /// One webhook delivery attempt.
    pub fn observe_delivery(&self, outcome: DeliveryOutcome) {
        self.deliveries.with(&[outcome.label()]).inc();
    }
}
