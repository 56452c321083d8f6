//! A request's query string as the read routes take it (`GET
//! /v1/tool-calls`, `/v1/overview`, `/v1/nodes`): every `name=value` pair
//! percent-decoded, names checked against the route's own list, each value
//! given at most once unless the route says a name repeats. `+` is a plus
//! sign, not a space (RFC 3986; encode a space as `%20`), so a key holding
//! `+` is read one way only.
//!
//! Nothing here knows what a parameter means; each refusal is a `400
//! bad_request` naming the parameter, quoting at most
//! `input::MAX_QUOTED_BYTES` of what was sent.

use super::error::ApiError;
use super::validate::percent_decode;
use crate::input::quote;

/// The decoded pairs of one request's query string, in order.
pub(super) struct QueryParams {
    pairs: Vec<(String, String)>,
}

impl QueryParams {
    /// The pairs of a query string (`Request::query`), each name one of
    /// `known`, each value not empty, and only the names in `repeatable`
    /// more than once.
    pub(super) fn parse(
        query: Option<&str>,
        known: &[&str],
        repeatable: &[&str],
    ) -> Result<QueryParams, ApiError> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for pair in query.unwrap_or("").split('&') {
            if pair.is_empty() {
                continue;
            }
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let decode = |s: &str| {
                percent_decode(s).ok_or_else(|| {
                    ApiError::BadRequest(format!(
                        "query parameter {} is not valid percent-encoded UTF-8",
                        quote(name)
                    ))
                })
            };
            pairs.push((decode(name)?, decode(value)?));
        }
        QueryParams::from_pairs(pairs, known, repeatable)
    }

    /// Pairs already decoded (a bulk job's filter, given as JSON), checked
    /// by the same rules as a query string's.
    pub(super) fn from_pairs(
        given: Vec<(String, String)>,
        known: &[&str],
        repeatable: &[&str],
    ) -> Result<QueryParams, ApiError> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for (name, value) in given {
            if !known.contains(&name.as_str()) {
                return Err(ApiError::BadRequest(format!(
                    "unknown query parameter {}; this route takes {}",
                    quote(&name),
                    known.join(", ")
                )));
            }
            if value.is_empty() {
                return Err(ApiError::BadRequest(format!(
                    "query parameter {name} has no value"
                )));
            }
            if !repeatable.contains(&name.as_str()) && pairs.iter().any(|(n, _)| *n == name) {
                return Err(ApiError::BadRequest(format!(
                    "query parameter {name} is given more than once; give it once"
                )));
            }
            pairs.push((name, value));
        }
        Ok(QueryParams { pairs })
    }

    /// The value of `name`, if given.
    pub(super) fn one(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name`, in order.
    pub(super) fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.pairs
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(query: &str) -> Result<QueryParams, ApiError> {
        QueryParams::parse(Some(query), &["status", "key", "limit"], &["status"])
    }

    fn refusal(query: &str) -> String {
        match parse(query) {
            Err(ApiError::BadRequest(message)) => message,
            Err(other) => panic!("{query}: {other:?}"),
            Ok(_) => panic!("{query}: accepted"),
        }
    }

    /// Values are percent-decoded (a `+` stays a plus); a name may repeat
    /// only where the route says so.
    #[test]
    fn pairs_are_decoded_and_checked() {
        let params = parse("status=failed&key=a%2Fb+c&status=pending&").unwrap();
        assert_eq!(
            params.all("status").collect::<Vec<_>>(),
            ["failed", "pending"]
        );
        assert_eq!(params.one("key"), Some("a/b+c"));
        assert_eq!(params.one("limit"), None);
        assert!(refusal("wait=1").contains("unknown query parameter \"wait\""));
        assert!(refusal("key=a&key=b").contains("more than once"));
        assert!(refusal("key=").contains("no value"));
        assert!(refusal("limit").contains("no value"));
        assert!(refusal("key=%FF").contains("percent-encoded"));
    }
}
