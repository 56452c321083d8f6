//! Which route a method and path name: `Route::parse`, a pure function read
//! once per request, and `ROUTES`, every (method, path template) the router
//! answers, generated from the same table (`RouteKind`), so the list that
//! `openapi.yaml` and README are held to cannot drift from what is parsed.
//!
//! A path names at most one template; a template answers one method (two
//! for `/v1/tool-calls`), and another method is `405` with exactly those in
//! `Allow`. It decodes nothing and checks no token: the router does, in the
//! order that matters (`/healthz`, the `Host` check, `/ui`, authentication).
//! A leaf of `api`.

/// One route the router answers: its method and path template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteKind {
    PostCall,
    GetCall,
    CallByKey,
    CallAudit,
    Stats,
    Healthz,
    Metrics,
    OpenApi,
    Tools,
    Mcp,
    ListCalls,
    Nodes,
    Overview,
    Cancel,
    Approve,
    Deny,
    Approval,
    Approvals,
    Rerun,
    CreateBulkJob,
    BulkJob,
    Pause,
    Resume,
    Verify,
    Ui,
    UiAsset,
}

impl RouteKind {
    /// Every route, in the order `ROUTES` lists them.
    pub const ALL: [RouteKind; 26] = [
        RouteKind::PostCall,
        RouteKind::GetCall,
        RouteKind::CallByKey,
        RouteKind::CallAudit,
        RouteKind::Stats,
        RouteKind::Healthz,
        RouteKind::Metrics,
        RouteKind::OpenApi,
        RouteKind::Tools,
        RouteKind::Mcp,
        RouteKind::ListCalls,
        RouteKind::Nodes,
        RouteKind::Overview,
        RouteKind::Cancel,
        RouteKind::Approve,
        RouteKind::Deny,
        RouteKind::Approval,
        RouteKind::Approvals,
        RouteKind::Rerun,
        RouteKind::CreateBulkJob,
        RouteKind::BulkJob,
        RouteKind::Pause,
        RouteKind::Resume,
        RouteKind::Verify,
        RouteKind::Ui,
        RouteKind::UiAsset,
    ];

    /// Its method and path template.
    pub const fn route(self) -> (&'static str, &'static str) {
        match self {
            RouteKind::PostCall => ("POST", "/v1/tool-calls"),
            RouteKind::GetCall => ("GET", "/v1/tool-calls/{call_id}"),
            RouteKind::CallByKey => ("GET", "/v1/tool-calls/by-key/{key}"),
            RouteKind::CallAudit => ("GET", "/v1/tool-calls/{call_id}/audit"),
            RouteKind::Stats => ("GET", "/stats"),
            RouteKind::Healthz => ("GET", "/healthz"),
            RouteKind::Metrics => ("GET", "/metrics"),
            RouteKind::OpenApi => ("GET", "/openapi.yaml"),
            RouteKind::Tools => ("GET", "/v1/tools"),
            RouteKind::Mcp => ("POST", "/mcp"),
            RouteKind::ListCalls => ("GET", "/v1/tool-calls"),
            RouteKind::Nodes => ("GET", "/v1/nodes"),
            RouteKind::Overview => ("GET", "/v1/overview"),
            RouteKind::Cancel => ("POST", "/v1/tool-calls/{call_id}/cancel"),
            RouteKind::Approve => ("POST", "/v1/tool-calls/{call_id}/approve"),
            RouteKind::Deny => ("POST", "/v1/tool-calls/{call_id}/deny"),
            RouteKind::Approval => ("GET", "/v1/tool-calls/{call_id}/approval"),
            RouteKind::Approvals => ("GET", "/v1/approvals"),
            RouteKind::Rerun => ("POST", "/v1/tool-calls/{call_id}/rerun"),
            RouteKind::CreateBulkJob => ("POST", "/v1/bulk-actions"),
            RouteKind::BulkJob => ("GET", "/v1/bulk-actions/{job_id}"),
            RouteKind::Pause => ("POST", "/v1/tools/{name}/pause"),
            RouteKind::Resume => ("POST", "/v1/tools/{name}/resume"),
            RouteKind::Verify => ("GET", "/v1/verify"),
            RouteKind::Ui => ("GET", "/ui"),
            RouteKind::UiAsset => ("GET", "/ui/{asset}"),
        }
    }
}

/// Every route the router answers, as (method, path template): what
/// `openapi.yaml` and README's endpoint table must describe (tests hold
/// them, and the live router's answers, to this list).
pub const ROUTES: &[(&str, &str)] = &TABLE;

/// `ROUTES`, made from `RouteKind::route` at compile time.
const TABLE: [(&str, &str); RouteKind::ALL.len()] = {
    let mut routes = [("", ""); RouteKind::ALL.len()];
    let mut i = 0;
    while i < routes.len() {
        routes[i] = RouteKind::ALL[i].route();
        i += 1;
    }
    routes
};

/// A parsed route: which, and the one path parameter it carries (the call
/// id, the key as sent, the job id, the tool's name, the asset; empty for
/// none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route<'a> {
    pub kind: RouteKind,
    pub param: &'a str,
}

/// Why a method and path name no route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unrouted {
    /// No template has this path.
    NotFound,
    /// The path's template answers other methods: these, for `Allow`.
    MethodNotAllowed(&'static str),
}

impl<'a> Route<'a> {
    /// The route `method` and `path` name.
    pub fn parse(method: &str, path: &'a str) -> Result<Route<'a>, Unrouted> {
        let (template, param) = template_of(path).ok_or(Unrouted::NotFound)?;
        let kinds = RouteKind::ALL
            .into_iter()
            .filter(|kind| kind.route().1 == template);
        let mut allowed = None;
        for kind in kinds {
            if kind.route().0 == method {
                return Ok(Route { kind, param });
            }
            allowed = Some(kind.route().0);
        }
        Err(Unrouted::MethodNotAllowed(match template {
            "/v1/tool-calls" => "GET, POST",
            _ => allowed.unwrap_or("GET"),
        }))
    }
}

/// The template `path` has, and its parameter.
fn template_of(path: &str) -> Option<(&'static str, &str)> {
    let fixed = RouteKind::ALL
        .into_iter()
        .map(|kind| kind.route().1)
        .find(|template| !template.contains('{') && *template == path);
    if let Some(template) = fixed {
        return Some((template, ""));
    }
    if let Some(asset) = path.strip_prefix("/ui/") {
        return Some(("/ui/{asset}", asset));
    }
    if let Some(key) = path.strip_prefix("/v1/tool-calls/by-key/") {
        return Some(("/v1/tool-calls/by-key/{key}", key));
    }
    if let Some(job_id) = path.strip_prefix("/v1/bulk-actions/") {
        return Some(("/v1/bulk-actions/{job_id}", job_id));
    }
    if let Some(rest) = path.strip_prefix("/v1/tools/") {
        return match rest.rsplit_once('/') {
            Some((name, "pause")) => Some(("/v1/tools/{name}/pause", name)),
            Some((name, "resume")) => Some(("/v1/tools/{name}/resume", name)),
            _ => None,
        };
    }
    let rest = path.strip_prefix("/v1/tool-calls/")?;
    let suffixes = [
        ("/cancel", "/v1/tool-calls/{call_id}/cancel"),
        ("/approve", "/v1/tool-calls/{call_id}/approve"),
        ("/deny", "/v1/tool-calls/{call_id}/deny"),
        ("/rerun", "/v1/tool-calls/{call_id}/rerun"),
        ("/audit", "/v1/tool-calls/{call_id}/audit"),
        ("/approval", "/v1/tool-calls/{call_id}/approval"),
    ];
    for (suffix, template) in suffixes {
        if let Some(call_id) = rest.strip_suffix(suffix) {
            return Some((template, call_id));
        }
    }
    Some(("/v1/tool-calls/{call_id}", rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(method: &str, path: &str) -> Result<(RouteKind, String), Unrouted> {
        Route::parse(method, path).map(|r| (r.kind, r.param.to_string()))
    }

    /// Every listed route is parsed back from its own template (its
    /// parameter filled in), so the list and the parser are one table.
    #[test]
    fn every_route_is_parsed_from_its_template() {
        for kind in RouteKind::ALL {
            let (method, template) = kind.route();
            let path = template
                .replace("{call_id}", "c_1")
                .replace("{key}", "k%2F1")
                .replace("{job_id}", "j_1")
                .replace("{name}", "charge")
                .replace("{asset}", "app.js");
            let route = Route::parse(method, &path).unwrap();
            assert_eq!(route.kind, kind, "{method} {path}");
            let param = template.contains('{').then_some(route.param);
            assert!(param.is_none_or(|p| !p.is_empty()), "{path}");
        }
        let distinct: std::collections::BTreeSet<_> = ROUTES.iter().collect();
        assert_eq!(distinct.len(), ROUTES.len(), "a route listed twice");
    }

    #[test]
    fn parameters_and_suffixes_are_told_apart() {
        let id = |s: &str| s.to_string();
        assert_eq!(
            parsed("GET", "/v1/tool-calls/c_9"),
            Ok((RouteKind::GetCall, id("c_9")))
        );
        assert_eq!(
            parsed("POST", "/v1/tool-calls/c_9/cancel"),
            Ok((RouteKind::Cancel, id("c_9")))
        );
        assert_eq!(
            parsed("GET", "/v1/tool-calls/by-key/a/b"),
            Ok((RouteKind::CallByKey, id("a/b")))
        );
        assert_eq!(
            parsed("POST", "/v1/tools/a/b/pause"),
            Ok((RouteKind::Pause, id("a/b")))
        );
        assert_eq!(
            parsed("GET", "/v1/tool-calls"),
            Ok((RouteKind::ListCalls, id("")))
        );
        assert_eq!(
            parsed("POST", "/v1/tool-calls"),
            Ok((RouteKind::PostCall, id("")))
        );
    }

    #[test]
    fn an_unknown_path_is_not_found_and_a_wrong_method_names_the_allowed() {
        for path in [
            "/",
            "/v2/tool-calls",
            "/v1/tools/charge",
            "/v1/tools/charge/stop",
            "/statsx",
        ] {
            assert_eq!(parsed("GET", path), Err(Unrouted::NotFound), "{path}");
        }
        let cases = [
            ("DELETE", "/v1/tool-calls", "GET, POST"),
            ("GET", "/v1/tool-calls/c_1/cancel", "POST"),
            ("POST", "/v1/tool-calls/c_1/audit", "GET"),
            ("POST", "/v1/tool-calls/c_1", "GET"),
            ("PUT", "/mcp", "POST"),
            ("POST", "/healthz", "GET"),
        ];
        for (method, path, allowed) in cases {
            assert_eq!(
                parsed(method, path),
                Err(Unrouted::MethodNotAllowed(allowed)),
                "{method} {path}"
            );
        }
    }
}
