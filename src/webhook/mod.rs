//! Webhooks: a tenant told, by a signed HTTP request, that one of its calls
//! started waiting for approval — so a chat tool can show it. The outbox is
//! the store's (`notifications`, written with the call); this module signs
//! and delivers it.
//!
//! Map (this file holds no type): `sign` (the Standard Webhooks signature,
//! HMAC-SHA256 over `id.timestamp.body`), `payload` (the body of an
//! `approval.requested` message), `delivery` (`Webhooks`, the `webhooks`
//! thread: claim, sign, POST, settle, retry with a bound).
//!
//! It never blocks a call and never logs a URL, a secret or a body. The
//! tenants' URLs and secrets are read from the auth file (`auth::webhook`).

mod delivery;
mod payload;
mod sign;

pub use crate::auth::decode_secret;
pub use delivery::{Webhooks, MAX_ATTEMPTS};
pub use sign::{hmac_sha256, signature};
