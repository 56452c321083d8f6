//! Tenants, their tokens and roles: the `--auth-file` loader and the check
//! of an `Authorization` header against it.
//!
//! The file holds SHA-256 hashes of tokens, never tokens:
//! `{"tenants": {"acme": {"token_sha256": "<64 hex>"}, "ops": {"token_sha256": "<64 hex>", "admin": true}}}`;
//! a tenant's entry may also name its people's tokens, each with a role,
//! and say whether the MCP client may decide approvals and where its
//! webhook is (`entry`). A role says what a token may do within its tenant
//! (`role`: `viewer`, `caller`, `operator`, `approver`, `admin`); a token
//! without one is a `caller`, and `"admin": true` an admin, as before roles
//! existed. A presented token is hashed at once and compared with every
//! token's hash in constant time, so neither the position of the first
//! differing byte nor which token matched shows in the time taken. Without
//! an auth file every request is the one anonymous tenant, an admin, which
//! is how the service behaved before tenants existed.
//!
//! This module must never keep, return or print a raw token: it borrows the
//! header value only long enough to hash it, and no error or `Debug` output
//! contains a token, a configured hash, a webhook's URL or its secret
//! (`webhook`). Its tests are in `tests`.

mod entry;
mod role;
mod webhook;

pub use role::{Action, Role};
pub use webhook::{decode_secret, WebhookTarget};

use entry::Credential;

use sha2::{Digest, Sha256};
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use subtle::{ConditionallySelectable, ConstantTimeEq};

/// The tenant every request belongs to when no auth file is given. The name
/// is refused in an auth file, so calls made without one never become visible
/// to a configured tenant.
pub const ANONYMOUS: &str = "anonymous";

/// The longest tenant name.
pub const MAX_TENANT_NAME: usize = 64;

/// Who made a request: the scope of its idempotency keys and calls, and
/// what the token that made it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    /// 1–64 of `[A-Za-z0-9_.-]`; what `calls.tenant` stores.
    pub name: Arc<str>,
    /// `role` is `Admin`: every tenant, `/metrics`, the global `/stats`.
    pub admin: bool,
    /// What the token may do within its tenant.
    pub role: Role,
    /// Who presented the token: its name among the tenant's `tokens`, or
    /// the tenant's own name for the tenant's token. What the audit records
    /// of a decision.
    pub principal: Arc<str>,
    /// The tenant lets the MCP client that made a call decide its approval
    /// where the tool's policy allows it (`mcp_client_may_approve`).
    pub client_may_approve: bool,
    /// The tenant has a webhook: a call of its that starts waiting for
    /// approval is notified.
    pub notify: bool,
}

impl Tenant {
    pub fn anonymous() -> Tenant {
        Tenant {
            name: Arc::from(ANONYMOUS),
            admin: true,
            role: Role::Admin,
            principal: Arc::from(ANONYMOUS),
            // Without an auth file anyone who reaches the service is this
            // admin already: the tool's policy alone decides.
            client_may_approve: true,
            notify: false,
        }
    }

    /// Whether this token may take `action`.
    pub fn may(&self, action: Action) -> bool {
        self.role.may(action)
    }
}

/// Why a request was not authenticated. Every variant is `401 unauthorized`
/// with a `WWW-Authenticate` challenge; none carries what was presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthError {
    /// No `Authorization` header.
    Missing,
    /// A header that is not `Bearer <token>`.
    NotBearer,
    /// A bearer token whose hash matches no tenant.
    UnknownToken,
}

impl AuthError {
    /// The `WWW-Authenticate` value (RFC 6750 section 3): a request without
    /// credentials gets the bare challenge, a bad one says `invalid_token`.
    pub fn challenge(self) -> &'static str {
        match self {
            AuthError::Missing => "Bearer realm=\"idempotent-tool\"",
            AuthError::NotBearer | AuthError::UnknownToken => {
                "Bearer realm=\"idempotent-tool\", error=\"invalid_token\""
            }
        }
    }
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            AuthError::Missing => "an Authorization: Bearer <token> header is required",
            AuthError::NotBearer => "the Authorization header must be Bearer <token>",
            AuthError::UnknownToken => "the bearer token is not valid",
        })
    }
}

impl std::error::Error for AuthError {}

/// What is wrong with an auth file, in one line naming the tenant and field.
#[derive(Debug)]
pub enum AuthFileError {
    Read(String, std::io::Error),
    Syntax(serde_json::Error),
    Invalid(String),
}

impl fmt::Display for AuthFileError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            AuthFileError::Read(path, e) => write!(f, "auth file {path}: {e}"),
            AuthFileError::Syntax(e) => write!(f, "auth file is not valid JSON: {e}"),
            AuthFileError::Invalid(what) => write!(f, "auth file: {what}"),
        }
    }
}

impl std::error::Error for AuthFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AuthFileError::Read(_, e) => Some(e),
            AuthFileError::Syntax(e) => Some(e),
            AuthFileError::Invalid(_) => None,
        }
    }
}

/// Decides which tenant a request is: anonymous, or by bearer token.
pub struct Auth {
    /// Empty means no auth file: everyone is the anonymous tenant.
    credentials: Vec<Credential>,
    /// The tenants' webhooks, by tenant name.
    webhooks: Vec<(String, WebhookTarget)>,
    /// The tenant of every request when `credentials` is empty, made once so
    /// that a request costs a reference count, not an allocation.
    anonymous: Tenant,
}

impl fmt::Debug for Auth {
    /// Names, roles and settings only: hashes stay out of any output.
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_list()
            .entries(self.credentials.iter().map(|c| &c.tenant))
            .finish()
    }
}

impl Auth {
    /// No auth file: every request is the anonymous tenant.
    pub fn anonymous() -> Auth {
        Auth {
            credentials: Vec::new(),
            webhooks: Vec::new(),
            anonymous: Tenant::anonymous(),
        }
    }

    /// Load and validate `--auth-file`; a webhook's relative `secret_file`
    /// starts at the file's folder.
    pub fn load(path: &Path) -> Result<Auth, AuthFileError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| AuthFileError::Read(path.display().to_string(), e))?;
        let folder = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        Auth::from_json_in(&text, folder)
    }

    /// `from_json_in`, relative paths from the working directory.
    pub fn from_json(text: &str) -> Result<Auth, AuthFileError> {
        Auth::from_json_in(text, Path::new("."))
    }

    /// Validate an auth file's text: unknown fields, repeated members, bad
    /// names, bad hex, unknown roles and two tokens with one hash are all
    /// refused.
    pub fn from_json_in(text: &str, base_dir: &Path) -> Result<Auth, AuthFileError> {
        let root = crate::input::parse_strict(text.as_bytes()).map_err(AuthFileError::Syntax)?;
        let root = root
            .as_object()
            .ok_or_else(|| invalid("the top level must be an object {\"tenants\": {...}}"))?;
        entry::only_fields(root, &["tenants"], "the top level")?;
        let tenants = root
            .get("tenants")
            .ok_or_else(|| invalid("\"tenants\" is required"))?
            .as_object()
            .ok_or_else(|| invalid("\"tenants\" must be an object of tenant name to entry"))?;
        if tenants.is_empty() {
            return Err(invalid(
                "\"tenants\" is empty: no request could authenticate",
            ));
        }
        let mut credentials: Vec<Credential> = Vec::with_capacity(tenants.len());
        let mut webhooks = Vec::new();
        for (name, entry) in tenants {
            check_tenant_name(name)?;
            let entry = entry::parse(name, entry, base_dir)?;
            for credential in entry.credentials {
                if let Some(twin) = credentials
                    .iter()
                    .find(|c| c.token_sha256 == credential.token_sha256)
                {
                    return Err(invalid(format!(
                        "{} and {} have the same token_sha256; each token must be its own",
                        who(&twin.tenant),
                        who(&credential.tenant)
                    )));
                }
                credentials.push(credential);
            }
            if let Some(webhook) = entry.webhook {
                webhooks.push((name.clone(), webhook));
            }
        }
        Ok(Auth {
            credentials,
            webhooks,
            anonymous: Tenant::anonymous(),
        })
    }

    /// Whether requests must carry a token (an auth file was given).
    pub fn is_required(&self) -> bool {
        !self.credentials.is_empty()
    }

    /// The configured tenants' names, sorted, each once (none when
    /// anonymous).
    pub fn tenant_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .credentials
            .iter()
            .map(|c| c.tenant.name.to_string())
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// Every token's identity (tenant, principal, role; never its hash).
    pub fn tokens(&self) -> impl Iterator<Item = &Tenant> {
        self.credentials.iter().map(|c| &c.tenant)
    }

    /// The tenants' webhooks, by tenant name (for the webhook thread).
    pub fn webhooks(&self) -> Vec<(String, WebhookTarget)> {
        self.webhooks.clone()
    }

    /// The tenant a request is, from its `Authorization` header value.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Tenant, AuthError> {
        if !self.is_required() {
            return Ok(self.anonymous.clone());
        }
        let token = bearer_token(authorization.ok_or(AuthError::Missing)?)?;
        let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        self.find(&presented)
            .map(|c| c.tenant.clone())
            .ok_or(AuthError::UnknownToken)
    }

    /// Compare the presented hash with every tenant's, always all of them and
    /// each in full, selecting the match without a branch; only the final
    /// answer (found or not) decides anything.
    fn find(&self, presented: &[u8; 32]) -> Option<&Credential> {
        const NONE: u32 = u32::MAX;
        let mut matched = NONE;
        for (index, credential) in self.credentials.iter().enumerate() {
            let equal = credential.token_sha256.ct_eq(presented);
            // At most 2^32 - 1 tenants: the file is read into memory whole.
            matched = u32::conditional_select(&matched, &(index as u32), equal);
        }
        (matched != NONE).then(|| &self.credentials[matched as usize])
    }
}

/// `Bearer <token>` (RFC 6750 section 2.1: the scheme is case-insensitive, one
/// or more spaces, then a non-empty token).
fn bearer_token(header: &str) -> Result<&str, AuthError> {
    let (scheme, rest) = header.split_once(' ').ok_or(AuthError::NotBearer)?;
    let token = rest.trim_start_matches(' ');
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() || token.contains(' ') {
        return Err(AuthError::NotBearer);
    }
    Ok(token)
}

/// Whether `name` can be a tenant's: 1 to `MAX_TENANT_NAME` of `[A-Za-z0-9_.-]`.
pub fn is_tenant_name(name: &str) -> bool {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b"_.-".contains(&b);
    !name.is_empty() && name.len() <= MAX_TENANT_NAME && name.bytes().all(allowed)
}

fn check_tenant_name(name: &str) -> Result<(), AuthFileError> {
    if !is_tenant_name(name) {
        let shown: String = name.chars().take(MAX_TENANT_NAME).collect();
        return Err(invalid(format!(
            "tenant name {shown:?} must be 1 to {MAX_TENANT_NAME} of A-Z a-z 0-9 _ . -"
        )));
    }
    if name == ANONYMOUS {
        return Err(invalid(format!(
            "tenant name {ANONYMOUS:?} is reserved for the server without --auth-file"
        )));
    }
    Ok(())
}

/// How a refusal names a token: its tenant, and its name when it has one.
fn who(tenant: &Tenant) -> String {
    if tenant.principal == tenant.name {
        format!("tenant {:?}", &*tenant.name)
    } else {
        format!("tenant {:?}, token {:?}", &*tenant.name, &*tenant.principal)
    }
}

fn invalid(what: impl Into<String>) -> AuthFileError {
    AuthFileError::Invalid(what.into())
}

#[cfg(test)]
mod tests;
