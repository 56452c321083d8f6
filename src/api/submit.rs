//! The one way a call is submitted — `POST /v1/tool-calls` and MCP's
//! `tools/call` alike: chaos hooks split off, the tool's rules checked, the
//! fingerprint and (when the tool has one) the business key computed, then
//! create-or-get in the writer's transaction, and the new call handed to the
//! runner. With a worker to reserve (`Runner::reserve`: a free one, or for a
//! quick call a place behind other quick work) and no business key, the call
//! is created already `running` under that worker's lease and adopted by it
//! (`CallStore::create_claimed`: one writer operation, no separate claim);
//! otherwise it is created `pending` and submitted. Both transports therefore
//! share the store, the fingerprint, the workers, the retries and the audit;
//! only how the outcome is rendered differs.
//!
//! It must never execute a tool, and never answer before the call it names is
//! committed. A duplicate intent under a business key creates nothing.

use super::error::ApiError;
use super::key_cache::scoped_key;
use super::router::Api;
use crate::auth::Tenant;
use crate::chaos;
use crate::fingerprint::{canonical_object, fingerprint_canonical};
use crate::input::clip;
use crate::metrics::{Submission as Outcome, Transport};
use crate::runner::{log_claimed, Reservation};
use crate::store::{owner_name, BusinessKey, Call, Created, CreatedClaimed, Guarded, NewCall};
use crate::tools::OnDuplicate;
use serde_json::{Map, Value};
use std::time::Duration;

/// Largest canonical `args`, in bytes.
const MAX_ARGS_BYTES: usize = 64 * 1024;

/// How long a `503 overloaded` is held before it is sent (see
/// `Api::refuse_if_overloaded`).
const OVERLOADED_HOLD: Duration = Duration::from_millis(20);

/// One call as a client asked for it, before anything is checked.
pub(crate) struct Submission<'a> {
    pub tenant: &'a Tenant,
    pub key: &'a str,
    pub tool: &'a str,
    pub args: &'a Map<String, Value>,
    pub client_id: Option<String>,
    pub seq: Option<i64>,
    pub transport: Transport,
}

/// What a submission turned into.
pub(crate) enum Submitted {
    /// A settled answer the key cache already had rendered (REST only).
    Cached { call_id: String, body: Vec<u8> },
    /// The key's call: `replayed` when it already existed (not reset to run
    /// again); `duplicate_intent` when it is another key's call that holds
    /// this call's business key (`on_duplicate: "return"`).
    Call {
        call: Box<Call>,
        replayed: bool,
        duplicate_intent: bool,
    },
}

impl Api {
    /// Validate, then create-or-get under the key (and the business key),
    /// within the tenant. `use_cache`: a settled same-key answer may come
    /// from the key cache as rendered bytes.
    pub(crate) fn submit(&self, s: Submission, use_cache: bool) -> Result<Submitted, ApiError> {
        let (tool_args, hooks) =
            chaos::split(s.args).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        if let Some(hook) = chaos::names_a_hook(s.args) {
            if !self.chaos {
                return Err(ApiError::BadRequest(format!(
                    "args.{hook} is a chaos hook; the server must run with --chaos"
                )));
            }
        }
        let prepared = self
            .tools
            .prepare(s.tool, &tool_args)
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let business_key = match &prepared.spec.business_key {
            Some(rule) => Some(BusinessKey {
                value: rule
                    .key_of(&tool_args)
                    .map_err(|e| ApiError::BadRequest(e.to_string()))?,
                window_secs: rule.window_secs as f64,
            }),
            None => None,
        };
        let quick = prepared.quick && hooks == chaos::Hooks::default();
        let canonical_args = canonical_object(&tool_args);
        let fingerprint = fingerprint_canonical(s.tool, &canonical_args);
        // What the worker runs: the tool's args plus any hooks, canonical too.
        let args_json = if hooks == chaos::Hooks::default() {
            canonical_args
        } else {
            canonical_object(s.args)
        };
        if args_json.len() > MAX_ARGS_BYTES {
            return Err(ApiError::ArgsTooLarge {
                size: args_json.len(),
                limit: MAX_ARGS_BYTES,
            });
        }
        let new = NewCall {
            tenant: s.tenant.name.to_string(),
            idem_key: s.key.to_string(),
            fingerprint,
            tool: s.tool.to_string(),
            args_json,
            client_id: s.client_id,
            seq: s.seq,
        };
        let cache_key = scoped_key(&s.tenant.name, s.key);
        if use_cache {
            if let Some((call_id, body)) = self.keys.settled(&cache_key, &new.fingerprint) {
                self.count(s.transport, Outcome::Replayed);
                return Ok(Submitted::Cached { call_id, body });
            }
        }
        let (created, adopted) = match business_key {
            None => self.create_or_get(&cache_key, new, quick)?,
            Some(key) => {
                // Pushback as on the path without a business key.
                self.refuse_if_overloaded()?;
                match self.store.create_or_get_guarded(new, Some(key))? {
                    Guarded::Created(created) => {
                        self.keys.insert_has_row(&cache_key);
                        (created, Adopted::No)
                    }
                    Guarded::Duplicate(call) => {
                        self.count(s.transport, Outcome::DuplicateIntent);
                        let rule = prepared.spec.business_key.as_ref();
                        return match rule.map(|r| r.on_duplicate) {
                            Some(OnDuplicate::Return) => {
                                self.metrics.replays.inc();
                                Ok(Submitted::Call {
                                    call: Box::new(call),
                                    replayed: true,
                                    duplicate_intent: true,
                                })
                            }
                            _ => Err(ApiError::DuplicateIntent {
                                call_id: call.call_id,
                            }),
                        };
                    }
                }
            }
        };
        let (call, replayed) = match created {
            Created::New(call) => {
                self.count(s.transport, Outcome::Created);
                self.metrics.calls_created.inc();
                // As the audit has it: created, then (in the same
                // transaction, when a worker was free) claimed.
                log_transition("call created", "created", &call, "none", "pending");
                match adopted {
                    Adopted::Yes { owner } => log_claimed(&call.call_id, call.attempt, &owner),
                    Adopted::No => self.runner.submit(&call.call_id, &call.tool, quick),
                }
                if let Some(delay) = hooks.delay_response {
                    std::thread::sleep(delay);
                }
                (call, false)
            }
            Created::RetryReset(call) => {
                self.count(s.transport, Outcome::Created);
                self.metrics.retry_resets.inc();
                log_transition(
                    "call reset to run again",
                    "retry_reset",
                    &call,
                    "failed",
                    "pending",
                );
                // Rare; its stored args are not parsed here, so assume slow.
                self.runner.submit(&call.call_id, &call.tool, false);
                (call, false)
            }
            Created::Existing(call) => {
                self.count(s.transport, Outcome::Replayed);
                (call, true)
            }
            Created::Conflict(call) => {
                self.count(s.transport, Outcome::Conflict);
                self.metrics.conflicts.inc();
                // The key is the client's own input: the message repeats at most
                // `input::MAX_QUOTED_BYTES` of it.
                return Err(ApiError::Conflict {
                    key: clip(&call.idem_key).to_string(),
                    call_id: call.call_id,
                });
            }
        };
        Ok(Submitted::Call {
            call: Box::new(call),
            replayed,
            duplicate_intent: false,
        })
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
    ) -> Result<(Created, Adopted), ApiError> {
        if self.keys.has_row(cache_key) {
            if let Some(existing) = self.store.find_by_key(&new.tenant, &new.idem_key)? {
                if existing.fingerprint == new.fingerprint && !existing.is_retryable_failure() {
                    return Ok((Created::Existing(existing), Adopted::No));
                }
            }
        }
        self.refuse_if_overloaded()?;
        let created = match self.runner.reserve(&new.tool, quick) {
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
    ) -> Result<(Created, Adopted), ApiError> {
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

    /// Pushback: past `--max-pending` calls queued for a worker, a request that
    /// may create a call is refused before it joins the write queue, so the
    /// backlog stays bounded however many clients send, and the workers'
    /// completions keep the writer's time. A known key was answered before
    /// this (its retry adds nothing to the backlog).
    fn refuse_if_overloaded(&self) -> Result<(), ApiError> {
        let pending = self.metrics.queued_calls.get().max(0.0) as usize;
        if pending >= self.max_pending {
            self.metrics.overloaded.inc();
            // A client that ignores `Retry-After` asks again at once; holding
            // the refusal a moment keeps such clients from spending the CPU
            // the workers need to drain the backlog (it costs this connection's
            // thread a sleep, no CPU).
            std::thread::sleep(OVERLOADED_HOLD);
            return Err(ApiError::Overloaded {
                pending,
                max: self.max_pending,
            });
        }
        Ok(())
    }

    /// The settled answer for a REST retry whose body is byte for byte the
    /// one the key cache last answered under this tenant and key: counted as
    /// a replay, with nothing parsed (see `KeyCache::settled_for_request`).
    pub(crate) fn replay_same_bytes(
        &self,
        tenant: &Tenant,
        key: &str,
        body: &[u8],
    ) -> Option<(String, Vec<u8>)> {
        let cache_key = scoped_key(&tenant.name, key);
        let answer = self.keys.settled_for_request(&cache_key, body)?;
        self.count(Transport::Http, Outcome::Replayed);
        Some(answer)
    }

    fn count(&self, transport: Transport, outcome: Outcome) {
        if outcome == Outcome::Replayed {
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
