//! The web console at `/ui`: its pages, scripts and styles, compiled into
//! the binary (`assets`), and the one function that answers a `/ui` path
//! with them and the security headers every `/ui` answer carries.
//!
//! The console is plain HTML, CSS and JavaScript run by the browser: it
//! reads the same REST API as any client, with the bearer token the
//! operator types (kept in `sessionStorage`, sent as `Authorization`, never
//! a cookie). Loading it needs no token and shows no data, so this module
//! never authenticates, never reads the store, and never builds a page from
//! data: every value a page shows is put in as text by its script. Its
//! `Content-Security-Policy` allows scripts and styles from this origin
//! only (no inline script or style, nothing from another origin), so a key
//! or an argument holding markup has nothing to run in.

mod assets;

use crate::http::{ErrorCode, Response};
use crate::input::quote;
use assets::{Asset, ASSETS};

/// The policy of every `/ui` answer (see the module doc).
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; \
     frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// The headers of every `/ui` answer, the errors included.
pub const SECURITY_HEADERS: [(&str, &str); 4] = [
    ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
];

/// Whether `path` is the console's: `/ui` and everything under `/ui/`.
pub(crate) fn owns(path: &str) -> bool {
    path == "/ui" || path.starts_with("/ui/")
}

/// The answer to `method` on a console `path`: a page (every page is the
/// one HTML document; its script draws the page the path names), an asset,
/// the document with `404` for a path that names no page (its script draws
/// the console's own not-found page), `404 not_found` for an asset that is
/// not there (a path whose last part has a dot), or `405` for anything but
/// `GET`.
pub(crate) fn answer(method: &str, path: &str) -> Response {
    let response = if method != "GET" {
        Response::method_not_allowed("GET")
    } else if let Some(asset) = find(path) {
        Response {
            status: 200,
            headers: vec![("Content-Type".into(), asset.content_type.into())],
            body: asset.body.to_vec(),
            stream: None,
        }
    } else if !names_a_file(path) {
        let page = ASSETS
            .iter()
            .find(|asset| asset.name == "index.html")
            .expect("the document is an asset");
        Response {
            status: 404,
            headers: vec![("Content-Type".into(), page.content_type.into())],
            body: page.body.to_vec(),
            stream: None,
        }
    } else {
        Response::from_error(
            ErrorCode::NotFound,
            format!("path {} not found", quote(path)),
        )
    };
    SECURITY_HEADERS
        .iter()
        .fold(response, |response, (name, value)| {
            response.with_header(name, value)
        })
}

/// The asset a path names; a page path names the HTML document.
fn find(path: &str) -> Option<&'static Asset> {
    let rest = path.strip_prefix("/ui").unwrap_or(path);
    let name = if is_page(rest) {
        "index.html"
    } else {
        rest.strip_prefix('/')?
    };
    ASSETS.iter().find(|asset| asset.name == name)
}

/// Whether `path` asks for a file (its last part has a dot: `app.css`,
/// `nope.js`) rather than a page.
fn names_a_file(path: &str) -> bool {
    path.rsplit('/')
        .next()
        .is_some_and(|last| last.contains('.'))
}

/// The console's page paths (after `/ui`): the overview, the calls, one
/// call, the approval queue, the tools and the promise check.
fn is_page(rest: &str) -> bool {
    match rest {
        "" | "/" | "/calls" | "/approvals" | "/tools" | "/verify" => true,
        _ => rest
            .strip_prefix("/calls/")
            .is_some_and(|id| !id.is_empty() && !id.contains('/')),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_serve_the_document_and_assets_their_type_with_every_header() {
        for path in [
            "/ui",
            "/ui/",
            "/ui/calls",
            "/ui/calls/c_1",
            "/ui/approvals",
            "/ui/tools",
            "/ui/verify",
        ] {
            let response = answer("GET", path);
            assert_eq!(response.status, 200, "{path}");
            assert_eq!(
                response.header("Content-Type"),
                Some("text/html; charset=utf-8")
            );
        }
        let script = answer("GET", "/ui/app.js");
        assert_eq!(
            script.header("Content-Type"),
            Some("text/javascript; charset=utf-8")
        );
        for (path, status, html) in [
            ("/ui/app.css", 200, false),
            ("/ui/nope.js", 404, false),
            ("/ui/calls/a/b", 404, true),
            ("/ui/no-such-page", 404, true),
        ] {
            let response = answer("GET", path);
            assert_eq!(response.status, status, "{path}");
            let is_html = response.header("Content-Type") == Some("text/html; charset=utf-8");
            assert_eq!(
                is_html, html,
                "{path}: the console's own not-found page or not"
            );
            for (name, value) in SECURITY_HEADERS {
                assert_eq!(response.header(name), Some(value), "{path} {name}");
            }
        }
        assert_eq!(answer("POST", "/ui").status, 405);
    }

    #[test]
    fn the_document_has_no_inline_script_or_style() {
        let html = std::str::from_utf8(find("/ui").unwrap().body).unwrap();
        assert!(
            !html.contains("<script>") && !html.contains("style="),
            "{html}"
        );
        assert!(!html.contains("<style"), "{html}");
        assert!(
            !html.contains("http://") && !html.contains("https://"),
            "{html}"
        );
    }
}
