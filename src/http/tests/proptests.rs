//! Property tests: generated valid requests parse to what was sent, however
//! they are split; mutated and arbitrary bytes never panic and get the same
//! verdict byte by byte as whole.

use super::*;
use proptest::prelude::*;

/// A valid request and the `Request` it must parse to.
#[derive(Debug, Clone)]
struct Sample {
    bytes: Vec<u8>,
    expected: Request,
}

fn sample() -> impl Strategy<Value = Sample> {
    let method = prop::sample::select(vec!["GET", "POST", "PUT", "DELETE", "PATCH", "X-CUSTOM"]);
    let path = "/[a-zA-Z0-9%._~/-]{0,24}";
    let query = prop::option::of("[a-zA-Z0-9=&%?/]{0,16}");
    let version = prop::bool::ANY;
    let headers = prop::collection::vec(
        (
            "[a-zA-Z0-9!#$%&'*+.^_`|~-]{1,10}",
            "([!-~]([ -~\u{80}-\u{ff}]{0,16}[!-~])?)?",
            "[ \t]{0,2}",
            "[ \t]{0,2}",
        ),
        0..6,
    );
    let body = prop::collection::vec(any::<u8>(), 0..48);
    let framing = 0..3u8;
    let chunk_sizes = prop::collection::vec(1..16usize, 1..8);
    let extension = prop::option::of("; ?[a-z]{1,4}(=([a-z0-9]{1,4}|\"[a-z ;=]{0,6}\"))?");
    let trailers = prop::collection::vec(("[a-zA-Z-]{1,8}", "[a-z0-9 ]{0,8}"), 0..3);
    let bare_lf = prop::bool::ANY;
    (
        (method, path, query, version, headers),
        (body, framing, chunk_sizes, extension, trailers, bare_lf),
    )
        .prop_map(
            |(
                (method, path, query, http11, headers),
                (body, framing, sizes, ext, trailers, bare_lf),
            )| {
                build_sample(
                    method, path, query, http11, headers, body, framing, sizes, ext, trailers,
                    bare_lf,
                )
            },
        )
}

#[allow(clippy::too_many_arguments)]
fn build_sample(
    method: &str,
    path: String,
    query: Option<String>,
    http11: bool,
    headers: Vec<(String, String, String, String)>,
    body: Vec<u8>,
    framing: u8,
    sizes: Vec<usize>,
    extension: Option<String>,
    trailers: Vec<(String, String)>,
    bare_lf: bool,
) -> Sample {
    let eol: &[u8] = if bare_lf { b"\n" } else { b"\r\n" };
    let target = match &query {
        Some(q) => format!("{path}?{q}"),
        None => path.clone(),
    };
    let version = if http11 {
        Version::Http11
    } else {
        Version::Http10
    };
    let mut bytes = format!(
        "{method} {target} {}",
        if http11 { "HTTP/1.1" } else { "HTTP/1.0" }
    )
    .into_bytes();
    bytes.extend_from_slice(eol);
    let mut expected_headers = Vec::new();
    let mut field = |bytes: &mut Vec<u8>, name: &str, pre: &str, value: &str, post: &str| {
        bytes.extend_from_slice(format!("{name}:{pre}{value}{post}").as_bytes());
        bytes.extend_from_slice(eol);
        expected_headers.push((name.to_ascii_lowercase(), value.to_string()));
    };
    field(&mut bytes, "Host", " ", "example", "");
    for (name, value, pre, post) in &headers {
        // Names with meaning to the parser are covered by the tables in `tests.rs`.
        let name = format!("X-{name}");
        field(&mut bytes, &name, pre, value, post);
    }
    let body = if framing == 0 { Vec::new() } else { body };
    match framing {
        1 => field(
            &mut bytes,
            "Content-Length",
            " ",
            &body.len().to_string(),
            "",
        ),
        2 => field(&mut bytes, "Transfer-Encoding", " ", "chunked", ""),
        _ => {}
    }
    bytes.extend_from_slice(eol);
    match framing {
        1 => bytes.extend_from_slice(&body),
        2 => bytes.extend_from_slice(&chunked(&body, &sizes, extension.as_deref(), &trailers)),
        _ => {}
    }
    let expected = Request {
        method: method.to_string(),
        target,
        path,
        query,
        version,
        headers: expected_headers,
        body,
        client: Default::default(),
        peer: None,
    };
    Sample { bytes, expected }
}

fn chunked(
    body: &[u8],
    sizes: &[usize],
    extension: Option<&str>,
    trailers: &[(String, String)],
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = body;
    let mut sizes = sizes.iter().cycle();
    while !rest.is_empty() {
        let n = (*sizes.next().unwrap_or(&1)).min(rest.len());
        out.extend_from_slice(format!("{n:x}{}\r\n", extension.unwrap_or("")).as_bytes());
        out.extend_from_slice(&rest[..n]);
        out.extend_from_slice(b"\r\n");
        rest = &rest[n..];
    }
    out.extend_from_slice(b"0\r\n");
    for (name, value) in trailers {
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Generous limits so generated requests are valid by construction.
const ROOMY: ParseLimits = ParseLimits {
    max_request_line: 1024,
    max_header_bytes: 4096,
    max_headers: 16,
    max_body: 4096,
};

#[derive(Debug, Clone)]
enum Mutation {
    Replace(usize, u8),
    Insert(usize, u8),
    Delete(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let interesting = prop::sample::select(vec![
        b'\r', b'\n', b' ', b'\t', b':', b';', b'0', b'f', b'"', 0u8, 0xff,
    ]);
    let byte = prop_oneof![interesting, any::<u8>()];
    prop_oneof![
        (any::<usize>(), byte.clone()).prop_map(|(i, b)| Mutation::Replace(i, b)),
        (any::<usize>(), byte).prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<usize>().prop_map(Mutation::Delete),
    ]
}

fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        match *m {
            Mutation::Replace(i, b) if !bytes.is_empty() => {
                let i = i % bytes.len();
                bytes[i] = b;
            }
            Mutation::Insert(i, b) => bytes.insert(i % (bytes.len() + 1), b),
            Mutation::Delete(i) if !bytes.is_empty() => {
                let i = i % bytes.len();
                bytes.remove(i);
            }
            _ => {}
        }
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn generated_requests_parse_to_what_was_sent(s in sample()) {
        let parsed = parse_request(&s.bytes, &ROOMY);
        prop_assert_eq!(parsed, Ok(ParseStatus::Complete((s.expected, s.bytes.len()))));
    }

    #[test]
    fn generated_requests_parse_the_same_split_anywhere(s in sample()) {
        let expected = Ok(Some((s.expected.clone(), s.bytes.len())));
        for split in 0..=s.bytes.len() {
            let (a, b) = s.bytes.split_at(split);
            prop_assert_eq!(&fed_in_pieces([a, b], &ROOMY), &expected, "split at {}", split);
            if split < s.bytes.len() {
                prop_assert_eq!(parse_request(a, &ROOMY), Ok(ParseStatus::Partial), "prefix {}", split);
            }
        }
        prop_assert_eq!(&byte_at_a_time(&s.bytes, &ROOMY), &expected);
    }

    #[test]
    fn pipelined_requests_separate_exactly(a in sample(), b in sample()) {
        let mut both = a.bytes.clone();
        both.extend_from_slice(&b.bytes);
        let first = parse_request(&both, &ROOMY);
        prop_assert_eq!(first, Ok(ParseStatus::Complete((a.expected, a.bytes.len()))));
        let second = parse_request(&both[a.bytes.len()..], &ROOMY);
        prop_assert_eq!(second, Ok(ParseStatus::Complete((b.expected, b.bytes.len()))));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_request(&bytes, &LIMITS);
        let _ = parse_request(&bytes, &ROOMY);
    }

    #[test]
    fn mutated_requests_never_panic_and_parse_the_same_byte_by_byte(
        s in sample(),
        mutations in prop::collection::vec(mutation(), 1..5),
    ) {
        let bytes = mutate(s.bytes, &mutations);
        let whole = parse_request(&bytes, &ROOMY).map(as_option);
        if let Ok(Some((_, used))) = &whole {
            prop_assert!(*used <= bytes.len());
        }
        prop_assert_eq!(byte_at_a_time(&bytes, &ROOMY), whole);
    }
}
