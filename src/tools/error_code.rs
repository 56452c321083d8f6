//! `ToolErrorCode`: the one table of the codes a failed attempt is recorded
//! with (`error.code` of a `failed` call), each with whether such a failure is
//! retryable and a line saying when it happens.
//!
//! This file owns the pairing of code, string and retryable flag, and nothing
//! else: the executors (`builtin`, `http_tool`, `command_tool`) and the runner
//! pick a code and write the message. It must never change a code's string or
//! its flag: clients and dashboards match on both, and README's "Tool error
//! codes" table and `openapi.yaml`'s `ToolErrorCode` are held to this table by
//! tests. These are not HTTP answers (those are `http::ErrorCode`): the service
//! answers `200` with a call whose `error` carries one of these.

use std::fmt;

/// Declares `ToolErrorCode` from one list, so the variants, `ALL`, `as_str`
/// and `retryable` cannot disagree or miss a code.
macro_rules! tool_error_codes {
    ($($(#[doc = $doc:literal])* $variant:ident => ($code:literal, retryable: $retryable:literal),)+) => {
        /// Every code a failed attempt is recorded with.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ToolErrorCode {
            $($(#[doc = $doc])* $variant,)+
        }

        impl ToolErrorCode {
            /// Every code, built-ins first, then `http`, then `command`.
            pub const ALL: &'static [ToolErrorCode] = &[$(ToolErrorCode::$variant,)+];

            /// The stable string stored and sent as `error.code`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ToolErrorCode::$variant => $code,)+
                }
            }

            /// Whether another attempt may succeed. A failure may say otherwise
            /// only where this table's doc line says so
            /// ([`ToolError::with_retryable`](super::ToolError::with_retryable)).
            pub fn retryable(self) -> bool {
                match self {
                    $(ToolErrorCode::$variant => $retryable,)+
                }
            }
        }
    };
}

tool_error_codes! {
    /// The stored args fail the tool's rules when an attempt starts (the
    /// tools file changed since the call was accepted).
    BadArgs => ("bad_args", retryable: false),
    /// The answers its approval's questions were given could not be read
    /// when an attempt started (the database did not answer): the tool did
    /// not run.
    InputsUnavailable => ("inputs_unavailable", retryable: true),
    /// The built-in `fail` tool failed as asked; retryable when its
    /// `retryable` argument says so.
    ToolFailed => ("tool_failed", retryable: false),
    /// `http`: 408, 425, 429 or 5xx, a refused or reset connection, an
    /// unresolved host.
    DownstreamUnavailable => ("downstream_unavailable", retryable: true),
    /// `http`: no answer within `timeout_ms`.
    DownstreamTimeout => ("downstream_timeout", retryable: true),
    /// `http`: any other status (3xx included).
    DownstreamRejected => ("downstream_rejected", retryable: false),
    /// `http`: the downstream's certificate fails verification.
    DownstreamCertificate => ("downstream_certificate", retryable: false),
    /// `http`: another TLS failure.
    DownstreamTls => ("downstream_tls", retryable: false),
    /// `http`: a 2xx body over 1 MiB.
    DownstreamResponseTooLarge => ("downstream_response_too_large", retryable: false),
    /// `http`: an answer that is not HTTP/1.1.
    DownstreamProtocolError => ("downstream_protocol_error", retryable: false),
    /// `http`: the request could not be made (an unusable URL, another
    /// client failure).
    DownstreamError => ("downstream_error", retryable: false),
    /// `command`: exit 75 (`EX_TEMPFAIL`).
    CommandTempfail => ("command_tempfail", retryable: true),
    /// `command`: past `timeout_ms`; its process group was killed.
    CommandTimeout => ("command_timeout", retryable: true),
    /// `command`: any other exit status; retryable only when the command
    /// could not be waited for.
    CommandFailed => ("command_failed", retryable: false),
    /// `command`: ended by a signal.
    CommandKilled => ("command_killed", retryable: false),
    /// `command`: stdout over 1 MiB (the group is killed at once).
    CommandOutputTooLarge => ("command_output_too_large", retryable: false),
    /// `command`: cannot be started; retryable for a busy executable.
    CommandSpawnFailed => ("command_spawn_failed", retryable: false),
}

impl fmt::Display for ToolErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// README's tool error table is what clients and dashboards code against.
    const README: &str = include_str!("../../README.md");

    /// `(code, retryable)` of every row of README's "Tool error codes" table;
    /// the Retryable cell starts with `yes` or `no`.
    fn readme_tool_error_table() -> Vec<(String, bool)> {
        let section = README
            .split("\n### Tool error codes\n")
            .nth(1)
            .expect("README has a \"Tool error codes\" section");
        let section = section.split("\n#").next().unwrap_or(section);
        section
            .lines()
            .filter_map(|line| {
                let mut cells = line.split('|').map(str::trim).skip(1);
                let code = cells.next()?.strip_prefix('`')?.strip_suffix('`')?;
                let retryable = match cells.next()? {
                    cell if cell.starts_with("yes") => true,
                    cell if cell.starts_with("no") => false,
                    _ => return None,
                };
                Some((code.to_string(), retryable))
            })
            .collect()
    }

    fn table() -> Vec<(String, bool)> {
        ToolErrorCode::ALL
            .iter()
            .map(|c| (c.as_str().to_string(), c.retryable()))
            .collect()
    }

    #[test]
    fn every_code_has_a_distinct_string() {
        let strings: HashSet<&str> = ToolErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(strings.len(), ToolErrorCode::ALL.len());
    }

    #[test]
    fn readme_lists_exactly_these_codes_with_their_retryable_flag() {
        let readme = readme_tool_error_table();
        assert_eq!(readme, table(), "README's Tool error codes table");
    }
}
