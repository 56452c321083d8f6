//! Submit: the one way a call is created, for `POST /v1/tool-calls` and
//! MCP's `tools/call` alike, in named steps — the request checked (`check`),
//! a settled answer already kept for it (REST), then create-or-get in the
//! writer's transaction (or the guarded create under a business key), and
//! what was created handed to the runner. With a worker to reserve
//! (`Runner::reserve`: a free one, or for a quick call a place behind other
//! quick work) and no business key, the call is created already `running`
//! under that worker's lease and adopted by it (`CallStore::create_claimed`:
//! one writer operation, no separate claim); otherwise it is created
//! `pending` and submitted. A call whose tool's approval policy holds is
//! created `awaiting_approval` with its request, and reserved no worker:
//! a decision (`decide`) hands it to the runner.
//!
//! It must never execute a tool, and never answer before the call it names
//! is committed. A duplicate intent under a business key creates nothing.

use super::check::{check, Checked};
use super::error::CallError;
use super::key_cache::scoped_key;
use super::request::{CallRequest, Submitted};
use super::service::Calls;
use crate::auth::Tenant;
use crate::input::clip;
use crate::metrics::{SubmitOutcome, Transport};
use crate::runner::{log_claimed, Reservation};
use crate::store::{
    owner_name, BusinessKey, Call, Created, CreatedClaimed, Guarded, NewCall, Status,
};
use crate::tools::OnDuplicate;
use std::time::Duration;

impl Calls {
    /// Check the request, then create-or-get under its key (and its
    /// business key), within its tenant. A REST request's settled same-key
    /// answer may come from the key cache as rendered bytes.
    pub fn submit(&self, request: CallRequest) -> Result<Submitted, CallError> {
        let (tenant, key, transport) = (request.tenant, request.key, request.transport);
        let checked = check(&self.tools, self.chaos, request)?;
        let cache_key = scoped_key(&tenant.name, key);
        if let Some(kept) = self.kept_answer(&cache_key, &checked.new.fingerprint, transport) {
            return Ok(kept);
        }
        let Checked {
            new,
            guard,
            quick,
            delay_response,
        } = checked;
        let (created, adopted) = match guard {
            None => self.create_or_get(&cache_key, new, quick)?,
            Some((business_key, on_duplicate)) => {
                match self.create_guarded(&cache_key, new, business_key)? {
                    Guarded::Created(created) => (created, Adopted::No),
                    Guarded::Duplicate(call) => {
                        return self.duplicate_intent(call, on_duplicate, transport)
                    }
                }
            }
        };
        self.answer(created, adopted, quick, delay_response, transport)
    }

    /// What create-or-get did, as the request's answer: a new call started
    /// (its answer held by `_delay_response_ms`), a failure reset to run
    /// again, the key's existing call, or a conflict.
    fn answer(
        &self,
        created: Created,
        adopted: Adopted,
        quick: bool,
        delay_response: Option<Duration>,
        transport: Transport,
    ) -> Result<Submitted, CallError> {
        let (call, replayed) = match created {
            Created::New(call) => {
                self.started(&call, adopted, quick, transport);
                if let Some(delay) = delay_response {
                    std::thread::sleep(delay);
                }
                (call, false)
            }
            Created::RetryReset(call) => {
                self.reset_to_run_again(&call, transport);
                (call, false)
            }
            Created::Existing(call) => {
                self.count(transport, SubmitOutcome::Replayed);
                (call, true)
            }
            Created::Conflict(call) => return Err(self.conflict(call, transport)),
        };
        Ok(Submitted::Call {
            call: Box::new(call),
            replayed,
            duplicate_intent: false,
        })
    }

    /// The settled answer the key cache kept for this key and fingerprint,
    /// counted as a replay. The cache keeps REST's rendering of an answer,
    /// so only REST is answered from it.
    fn kept_answer(
        &self,
        cache_key: &str,
        fingerprint: &str,
        transport: Transport,
    ) -> Option<Submitted> {
        if transport != Transport::Http {
            return None;
        }
        let (call_id, body) = self.keys.settled(cache_key, fingerprint)?;
        self.count(transport, SubmitOutcome::Replayed);
        Some(Submitted::Cached { call_id, body })
    }

    /// For a key known to have a row, the fast path first: a committed row with
    /// this key and fingerprint that needs no reset is the answer, without
    /// joining the write queue. Anything else — an unknown key, a conflict, a
    /// retryable failure — is decided inside the writer's transaction: with a
    /// worker reserved, by `create_claimed`; with none, the call is created
    /// `pending` and queued for the next worker.
    fn create_or_get(
        &self,
        cache_key: &str,
        new: NewCall,
        quick: bool,
    ) -> Result<(Created, Adopted), CallError> {
        if self.keys.has_row(cache_key) {
            if let Some(existing) = self.store.find_by_key(&new.tenant, &new.idem_key)? {
                if existing.fingerprint == new.fingerprint && !existing.is_retryable_failure() {
                    return Ok((Created::Existing(existing), Adopted::No));
                }
            }
        }
        self.pushback.refuse_if_overloaded(&self.metrics)?;
        // A gated call waits for a decision: no worker is reserved for it.
        let reserved = match new.gate {
            None => self.runner.reserve(&new.tool, quick),
            Some(_) => None,
        };
        let created = match reserved {
            Some(reservation) => self.create_claimed(new, reservation)?,
            None => (self.store.create_or_get(new)?, Adopted::No),
        };
        self.keys.insert_has_row(cache_key);
        Ok(created)
    }

    /// With a worker (and the tool's slot) reserved, a new call is created
    /// already `running` under a lease for that worker, which runs it at
    /// once: one writer operation where a create and a claim took two. A
    /// known key gives the reservation back and is answered as
    /// `create_or_get` answers it (a reset failure is then submitted).
    fn create_claimed(
        &self,
        new: NewCall,
        reservation: Reservation<'_>,
    ) -> Result<(Created, Adopted), CallError> {
        let owner = owner_name(self.store.instance(), "api");
        let CreatedClaimed { created, lease } =
            self.store
                .create_claimed(new, &owner, reservation.lease())?;
        Ok(match lease {
            Some(lease) => {
                self.runner.adopt(reservation, lease);
                (created, Adopted::Yes { owner })
            }
            None => (created, Adopted::No),
        })
    }

    /// Under a business key the writer decides, with the business key's
    /// index, whether this is a new intent; pushback as on the path without
    /// one. A duplicate creates nothing, so its key gets no row.
    fn create_guarded(
        &self,
        cache_key: &str,
        new: NewCall,
        business_key: BusinessKey,
    ) -> Result<Guarded, CallError> {
        self.pushback.refuse_if_overloaded(&self.metrics)?;
        let guarded = self.store.create_or_get_guarded(new, Some(business_key))?;
        if let Guarded::Created(_) = &guarded {
            self.keys.insert_has_row(cache_key);
        }
        Ok(guarded)
    }

    /// Another key's live call holds this request's business key: that call,
    /// marked, or a refusal naming it, as the tool's rule says.
    fn duplicate_intent(
        &self,
        call: Call,
        on_duplicate: OnDuplicate,
        transport: Transport,
    ) -> Result<Submitted, CallError> {
        self.count(transport, SubmitOutcome::DuplicateIntent);
        match on_duplicate {
            OnDuplicate::Return => {
                self.metrics.replays.inc();
                Ok(Submitted::Call {
                    call: Box::new(call),
                    replayed: true,
                    duplicate_intent: true,
                })
            }
            OnDuplicate::Reject => Err(CallError::DuplicateIntent {
                call_id: call.call_id,
            }),
        }
    }

    /// A new call, counted and logged as the audit has it — created, then
    /// (in the same transaction, when a worker was reserved) claimed — and
    /// left with its worker or handed to the runner.
    fn started(&self, call: &Call, adopted: Adopted, quick: bool, transport: Transport) {
        self.count(transport, SubmitOutcome::Created);
        self.metrics.calls_created.inc();
        if call.status == Status::AwaitingApproval {
            return self.waiting_for_approval(call);
        }
        log_transition("call created", "created", call, "none", "pending");
        match adopted {
            Adopted::Yes { owner } => log_claimed(&call.call_id, call.attempt, &owner),
            Adopted::No => self.runner.submit(&call.call_id, &call.tool, quick),
        }
    }

    /// A new gated call waits for a decision: one `info` line an alerting
    /// rule can match (`approval_requested`), counted, and the webhook
    /// thread woken when its tenant has a webhook. No worker is involved.
    fn waiting_for_approval(&self, call: &Call) {
        self.metrics.approvals.requested.inc();
        crate::log::info("call awaits approval")
            .event("approval_requested")
            .tenant(&call.tenant)
            .call_id(&call.call_id)
            .tool(&call.tool)
            .idem_key(&call.idem_key)
            .transition("none", "awaiting_approval")
            .emit();
        (self.on_approval_requested)();
    }

    /// A retryable failure the same request reset to `pending`: counted as
    /// created, and handed to the runner.
    fn reset_to_run_again(&self, call: &Call, transport: Transport) {
        self.count(transport, SubmitOutcome::Created);
        self.metrics.retry_resets.inc();
        log_transition(
            "call reset to run again",
            "retry_reset",
            call,
            "failed",
            "pending",
        );
        // Rare; its stored args are not parsed here, so assume slow.
        self.runner.submit(&call.call_id, &call.tool, false);
    }

    /// The key belongs to a call with another fingerprint.
    fn conflict(&self, call: Call, transport: Transport) -> CallError {
        self.count(transport, SubmitOutcome::Conflict);
        self.metrics.conflicts.inc();
        // The key is the client's own input: the message repeats at most
        // `input::MAX_QUOTED_BYTES` of it.
        CallError::Conflict {
            key: clip(&call.idem_key).to_string(),
            call_id: call.call_id,
        }
    }

    /// The settled answer for a REST retry whose body is byte for byte the
    /// one the key cache last answered under this tenant and key: counted as
    /// a replay, with nothing parsed (see `KeyCache::settled_for_request`).
    pub fn replay_same_bytes(
        &self,
        tenant: &Tenant,
        key: &str,
        body: &[u8],
    ) -> Option<(String, Vec<u8>)> {
        let cache_key = scoped_key(&tenant.name, key);
        let answer = self.keys.settled_for_request(&cache_key, body)?;
        self.count(Transport::Http, SubmitOutcome::Replayed);
        Some(answer)
    }

    /// Keep a final call's REST answer `body`, given to a request whose raw
    /// body was `request`, for the retries of its key. Only a final call's
    /// answer may be kept (`succeeded`): no transition leaves that state —
    /// a failed or cancelled call may be re-run by an operator, on any node.
    pub fn keep_answer(&self, tenant: &Tenant, key: &str, call: Call, body: &[u8], request: &[u8]) {
        debug_assert!(call.is_final(), "only a final answer never changes");
        let cache_key = scoped_key(&tenant.name, key);
        let kept = (call.call_id.as_str(), call.expires_at);
        self.keys
            .insert_settled(&cache_key, call.fingerprint, kept, body, request);
    }

    fn count(&self, transport: Transport, outcome: SubmitOutcome) {
        if outcome == SubmitOutcome::Replayed {
            self.metrics.replays.inc();
        }
        self.metrics.observe_submission(transport, outcome);
    }
}

/// Whether a new call was created already claimed and handed to a reserved
/// worker (`Yes`), or still has to be submitted to the runner.
enum Adopted {
    /// Under a lease for `owner`.
    Yes {
        owner: String,
    },
    No,
}

/// A call's state change made by a request, at `debug` (one per transition
/// would dominate the log at `info` under load).
fn log_transition(
    msg: &'static str,
    event: &'static str,
    call: &Call,
    from: &'static str,
    to: &'static str,
) {
    crate::log::debug(msg)
        .event(event)
        .call_id(&call.call_id)
        .tenant(&call.tenant)
        .attempt(call.attempt)
        .transition(from, to)
        .emit();
}
