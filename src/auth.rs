//! Tenants and their bearer tokens: the `--auth-file` loader and the check of
//! an `Authorization` header against it.
//!
//! The file holds SHA-256 hashes of tokens, never tokens:
//! `{"tenants": {"acme": {"token_sha256": "<64 hex>"}, "ops": {"token_sha256": "<64 hex>", "admin": true}}}`.
//! A presented token is hashed at once and compared with every tenant's hash in
//! constant time, so neither the position of the first differing byte nor which
//! tenant matched shows in the time taken. Without an auth file every request
//! is the one anonymous tenant, an admin, which is how the service behaved
//! before tenants existed.
//!
//! This module must never keep, return or print a raw token: it borrows the
//! header value only long enough to hash it, and no error or `Debug` output
//! contains a token or a configured hash.

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

/// Who made a request: the scope of its idempotency keys and calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    /// 1–64 of `[A-Za-z0-9_.-]`; what `calls.tenant` stores.
    pub name: Arc<str>,
    /// May read `/metrics` and the global `/stats`.
    pub admin: bool,
}

impl Tenant {
    pub fn anonymous() -> Tenant {
        Tenant {
            name: Arc::from(ANONYMOUS),
            admin: true,
        }
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

/// One tenant and the hash of its token.
struct Credential {
    token_sha256: [u8; 32],
    tenant: Tenant,
}

/// Decides which tenant a request is: anonymous, or by bearer token.
pub struct Auth {
    /// Empty means no auth file: everyone is the anonymous tenant.
    credentials: Vec<Credential>,
    /// The tenant of every request when `credentials` is empty, made once so
    /// that a request costs a reference count, not an allocation.
    anonymous: Tenant,
}

impl fmt::Debug for Auth {
    /// Names and admin flags only: hashes stay out of any output.
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
            anonymous: Tenant::anonymous(),
        }
    }

    /// Load and validate `--auth-file`.
    pub fn load(path: &Path) -> Result<Auth, AuthFileError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| AuthFileError::Read(path.display().to_string(), e))?;
        Auth::from_json(&text)
    }

    /// Validate an auth file's text: unknown fields, repeated members, bad
    /// names, bad hex and two tenants with one hash are all refused.
    pub fn from_json(text: &str) -> Result<Auth, AuthFileError> {
        let root = crate::input::parse_strict(text.as_bytes()).map_err(AuthFileError::Syntax)?;
        let root = root
            .as_object()
            .ok_or_else(|| invalid("the top level must be an object {\"tenants\": {...}}"))?;
        only_fields(root, &["tenants"], "the top level")?;
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
        for (name, entry) in tenants {
            let credential = credential(name, entry)?;
            if let Some(twin) = credentials
                .iter()
                .find(|c| c.token_sha256 == credential.token_sha256)
            {
                return Err(invalid(format!(
                    "tenants {:?} and {name:?} have the same token_sha256; each tenant needs its own token",
                    &*twin.tenant.name
                )));
            }
            credentials.push(credential);
        }
        Ok(Auth {
            credentials,
            anonymous: Tenant::anonymous(),
        })
    }

    /// Whether requests must carry a token (an auth file was given).
    pub fn is_required(&self) -> bool {
        !self.credentials.is_empty()
    }

    /// The configured tenants, sorted by name (none when anonymous).
    pub fn tenants(&self) -> impl Iterator<Item = &Tenant> {
        self.credentials.iter().map(|c| &c.tenant)
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

fn credential(name: &str, entry: &serde_json::Value) -> Result<Credential, AuthFileError> {
    check_tenant_name(name)?;
    let entry = entry.as_object().ok_or_else(|| {
        invalid(format!(
            "tenant {name:?} must be an object {{\"token_sha256\": \"<hex>\", \"admin\"?: bool}}"
        ))
    })?;
    only_fields(
        entry,
        &["token_sha256", "admin"],
        &format!("tenant {name:?}"),
    )?;
    let hex = entry
        .get("token_sha256")
        .ok_or_else(|| invalid(format!("tenant {name:?}: token_sha256 is required")))?
        .as_str()
        .ok_or_else(|| invalid(format!("tenant {name:?}: token_sha256 must be a string")))?;
    let token_sha256 = parse_sha256_hex(hex).ok_or_else(|| {
        invalid(format!(
            "tenant {name:?}: token_sha256 must be 64 hex digits (a SHA-256 of the token, not the token; got {} characters)",
            hex.chars().count()
        ))
    })?;
    let admin = match entry.get("admin") {
        None => false,
        Some(serde_json::Value::Bool(admin)) => *admin,
        Some(_) => {
            return Err(invalid(format!(
                "tenant {name:?}: admin must be true or false"
            )))
        }
    };
    let name = Arc::from(name);
    Ok(Credential {
        token_sha256,
        tenant: Tenant { name, admin },
    })
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

fn only_fields(
    object: &serde_json::Map<String, serde_json::Value>,
    known: &[&str],
    place: &str,
) -> Result<(), AuthFileError> {
    match object.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(field) => {
            let shown: String = field.chars().take(64).collect();
            Err(invalid(format!(
                "{place}: unknown field {shown:?} (expected: {})",
                known.join(", ")
            )))
        }
    }
}

/// 64 hex digits, either case, into 32 bytes.
fn parse_sha256_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(hex.as_bytes().chunks(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(out)
}

fn invalid(what: impl Into<String>) -> AuthFileError {
    AuthFileError::Invalid(what.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha256_hex(token: &str) -> String {
        Sha256::digest(token.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn two_tenants() -> Auth {
        let file = format!(
            r#"{{"tenants": {{"acme": {{"token_sha256": "{}"}},
                             "ops": {{"token_sha256": "{}", "admin": true}}}}}}"#,
            sha256_hex("acme-token"),
            sha256_hex("ops-token").to_uppercase()
        );
        Auth::from_json(&file).unwrap()
    }

    fn load_error(text: &str) -> String {
        let message = Auth::from_json(text).unwrap_err().to_string();
        assert!(!message.contains('\n'), "one line: {message}");
        message
    }

    #[test]
    fn each_token_authenticates_its_own_tenant() {
        let auth = two_tenants();
        assert!(auth.is_required());
        let acme = auth.authenticate(Some("Bearer acme-token")).unwrap();
        assert_eq!((&*acme.name, acme.admin), ("acme", false));
        let ops = auth.authenticate(Some("bearer   ops-token")).unwrap();
        assert_eq!((&*ops.name, ops.admin), ("ops", true));
    }

    #[test]
    fn wrong_missing_and_malformed_tokens_are_refused() {
        let auth = two_tenants();
        let cases = [
            (None, AuthError::Missing),
            (Some("Bearer acme-tokeN"), AuthError::UnknownToken),
            (Some("Bearer acme-toke"), AuthError::UnknownToken),
            (Some("Bearer acme-token "), AuthError::NotBearer),
            (Some("Basic YWNtZTp4"), AuthError::NotBearer),
            (Some("Bearer"), AuthError::NotBearer),
            (Some("Bearer "), AuthError::NotBearer),
            (Some("acme-token"), AuthError::NotBearer),
            (Some(""), AuthError::NotBearer),
        ];
        for (header, expected) in cases {
            assert_eq!(auth.authenticate(header), Err(expected), "{header:?}");
        }
    }

    #[test]
    fn errors_and_debug_never_show_tokens_or_hashes() {
        let auth = two_tenants();
        let debug = format!("{auth:?}");
        assert!(debug.contains("acme") && !debug.contains(&sha256_hex("acme-token")));
        for header in [None, Some("Bearer s3cret"), Some("Token s3cret")] {
            let err = auth.authenticate(header).unwrap_err();
            let shown = format!("{err} {err:?} {}", err.challenge());
            assert!(!shown.contains("s3cret"), "{shown}");
        }
        let hash = sha256_hex("x");
        let message = load_error(&format!(
            r#"{{"tenants": {{"a": {{"token_sha256": "{hash}"}}, "b": {{"token_sha256": "{hash}"}}}}}}"#
        ));
        assert!(message.contains("same token_sha256") && !message.contains(&hash));
        let message = load_error(r#"{"tenants": {"a": {"token_sha256": "my-raw-token"}}}"#);
        assert!(message.contains("64 hex") && !message.contains("my-raw-token"));
    }

    #[test]
    fn without_an_auth_file_everyone_is_the_anonymous_admin() {
        let auth = Auth::anonymous();
        assert!(!auth.is_required());
        for header in [None, Some("Bearer anything"), Some("garbage")] {
            assert_eq!(auth.authenticate(header), Ok(Tenant::anonymous()));
        }
        assert!(Tenant::anonymous().admin);
        assert_eq!(auth.tenants().count(), 0);
    }

    #[test]
    fn auth_file_mistakes_are_one_line_errors_naming_the_place() {
        let good = sha256_hex("t");
        let cases = [
            ("[]", "top level must be an object"),
            ("{}", "\"tenants\" is required"),
            (r#"{"tenants": []}"#, "must be an object"),
            (r#"{"tenants": {}}"#, "is empty"),
            (r#"{"tenants": {}, "extra": 1}"#, "unknown field \"extra\""),
            (r#"{"tenants": {"a": 1}}"#, "tenant \"a\" must be an object"),
            (
                r#"{"tenants": {"a": {}}}"#,
                "tenant \"a\": token_sha256 is required",
            ),
            (
                r#"{"tenants": {"a": {"token_sha256": 5}}}"#,
                "must be a string",
            ),
            (
                r#"{"tenants": {"a": {"token_sha256": "abc"}}}"#,
                "64 hex digits",
            ),
            (
                r#"{"tenants": {"a": {"token_sha256": "{good}", "admin": "yes"}}}"#,
                "admin must be true or false",
            ),
            (
                r#"{"tenants": {"a": {"token_sha256": "{good}", "role": "x"}}}"#,
                "tenant \"a\": unknown field \"role\"",
            ),
            (
                r#"{"tenants": {"": {"token_sha256": "{good}"}}}"#,
                "tenant name \"\" must be 1 to 64",
            ),
            (
                r#"{"tenants": {"a b": {"token_sha256": "{good}"}}}"#,
                "tenant name \"a b\"",
            ),
            (
                r#"{"tenants": {"anonymous": {"token_sha256": "{good}"}}}"#,
                "reserved",
            ),
            (
                r#"{"tenants": {"a": {"token_sha256": "{good}"}, "a": {"token_sha256": "{good}"}}}"#,
                "appears more than once",
            ),
            ("{\"tenants\": ", "not valid JSON"),
        ];
        for (text, expected) in cases {
            let text = text.replace("{good}", &good);
            let message = load_error(&text);
            assert!(message.contains(expected), "{text}: {message}");
        }
        let long = "x".repeat(MAX_TENANT_NAME + 1);
        let message = load_error(&format!(
            r#"{{"tenants": {{"{long}": {{"token_sha256": "{good}"}}}}}}"#
        ));
        assert!(message.contains("1 to 64"), "{message}");
        let ok = format!(
            r#"{{"tenants": {{"{}": {{"token_sha256": "{good}"}}}}}}"#,
            "A-z_0.9".repeat(9).chars().take(64).collect::<String>()
        );
        assert!(Auth::from_json(&ok).is_ok());
    }

    #[test]
    fn a_missing_file_names_its_path() {
        let err = Auth::load(Path::new("/nonexistent/auth.json")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/auth.json"), "{err}");
    }

    #[test]
    fn hex_parses_both_cases_and_nothing_else() {
        let lower = sha256_hex("t");
        let parsed = parse_sha256_hex(&lower).unwrap();
        assert_eq!(parse_sha256_hex(&lower.to_uppercase()), Some(parsed));
        assert_eq!(parsed.to_vec(), Sha256::digest(b"t").to_vec());
        assert_eq!(parse_sha256_hex(&lower[..62]), None);
        assert_eq!(parse_sha256_hex(&format!("{}g", &lower[..63])), None);
        assert_eq!(parse_sha256_hex(&format!("+{}", &lower[..63])), None);
        // 64 bytes that are not 64 characters: multi-byte UTF-8.
        assert_eq!(parse_sha256_hex(&"é".repeat(32)), None);
    }

    #[test]
    fn the_match_is_found_wherever_the_tenant_sits() {
        let tenants: Vec<String> = (0..50)
            .map(|i| {
                format!(
                    r#""t{i}": {{"token_sha256": "{}"}}"#,
                    sha256_hex(&format!("tok{i}"))
                )
            })
            .collect();
        let auth =
            Auth::from_json(&format!(r#"{{"tenants": {{{}}}}}"#, tenants.join(","))).unwrap();
        for i in [0, 1, 25, 49] {
            let tenant = auth.authenticate(Some(&format!("Bearer tok{i}"))).unwrap();
            assert_eq!(&*tenant.name, format!("t{i}"));
        }
        assert_eq!(
            auth.authenticate(Some("Bearer tok50")),
            Err(AuthError::UnknownToken)
        );
    }
}
