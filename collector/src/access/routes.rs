//! Every route and what it needs, in one table. The access middleware looks each request up
//! here before any handler runs; a route missing from the table is refused (500, logged), and
//! a test compares the table with the routes the router serves.

/// What a route needs from its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Anyone: probes, sign-in, the API description.
    Public,
    /// An agent's or remote writer's token, checked by the handler (it binds nodes).
    Agent,
    /// `/metrics`: the scrape token or a viewer, unless scraping is open.
    Scrape,
    /// A viewer (or more); `Teams` says what a team-scoped viewer gets.
    Read(Teams),
    /// An operator: approves and applies label actions.
    Operate,
}

/// What a route shows of tenants, for people scoped to some teams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Teams {
    /// The handler shows a scoped caller only its teams' tenants (and fleet totals).
    Filtered,
    /// Nothing per tenant: anyone who may read may see it.
    NoTenants,
    /// Every team's tenants at once: refused to scoped callers.
    AllTeams,
}

#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub method: &'static str,
    pub path: &'static str,
    pub need: Need,
}

const fn rule(method: &'static str, path: &'static str, need: Need) -> Rule {
    Rule { method, path, need }
}

use Need::*;
use Teams::*;

/// The table. Paths are axum's route patterns.
pub const TABLE: &[Rule] = &[
    // Probes and the API's description.
    rule("GET", "/healthz", Public),
    rule("GET", "/readyz", Public),
    rule("GET", "/healthz/tasks", Public),
    rule("GET", "/api/v1/openapi.json", Public),
    rule("GET", "/metrics", Scrape),
    // Signing in and out.
    rule("GET", "/login", Public),
    rule("POST", "/login", Public),
    rule("POST", "/logout", Public),
    rule("GET", "/auth/oidc", Public),
    rule("GET", "/auth/callback", Public),
    // Agents and remote writers (their tokens bind nodes; checked by the handlers).
    rule("POST", "/api/v1/ingest", Agent),
    rule("POST", "/api/v1/write", Agent),
    rule("GET", "/api/v1/nodes/{node}/labels", Agent),
    // The dashboard.
    rule("GET", "/", Read(Filtered)),
    rule("GET", "/nodes", Read(NoTenants)),
    rule("GET", "/nodes/{node}", Read(AllTeams)),
    rule("GET", "/gpus/{uuid}", Read(AllTeams)),
    rule("GET", "/tenants", Read(Filtered)),
    rule("GET", "/teams", Read(Filtered)),
    rule("GET", "/findings", Read(Filtered)),
    rule("GET", "/findings/{id}", Read(Filtered)),
    rule("GET", "/recommendations", Read(AllTeams)),
    rule("GET", "/recommendations/{id}", Read(AllTeams)),
    rule("POST", "/recommendations/{id}/approve", Operate),
    rule("GET", "/reports", Read(AllTeams)),
    rule("GET", "/alerts", Read(AllTeams)),
    // The read API.
    rule("GET", "/api/v1/nodes", Read(NoTenants)),
    rule("GET", "/api/v1/gpus", Read(NoTenants)),
    rule("GET", "/api/v1/tenants", Read(Filtered)),
    rule("GET", "/api/v1/series", Read(Filtered)),
    rule("GET", "/api/v1/funnel", Read(AllTeams)),
    rule("GET", "/api/v1/findings", Read(Filtered)),
    rule("GET", "/api/v1/recommendations", Read(AllTeams)),
    rule("GET", "/api/v1/plan", Read(AllTeams)),
    rule("GET", "/api/v1/outcomes", Read(AllTeams)),
    rule("GET", "/api/v1/alerts", Read(AllTeams)),
    rule("GET", "/api/v1/reports", Read(AllTeams)),
    rule("GET", "/api/v1/reports/{week}", Read(AllTeams)),
    rule("GET", "/api/v1/label-actions", Read(AllTeams)),
    rule("POST", "/api/v1/label-actions/{id}/approve", Operate),
];

/// The rule for a request; HEAD is answered as GET.
pub fn find(method: &str, path: &str) -> Option<&'static Rule> {
    let method = if method == "HEAD" { "GET" } else { method };
    TABLE.iter().find(|r| r.method == method && r.path == path)
}

/// Whether some method of `path` has a rule (another method then gets the router's 405).
pub fn known_path(path: &str) -> bool {
    TABLE.iter().any(|r| r.path == path)
}

/// Whether a concrete request path (`/api/v1/nodes/gpu-1/labels`) is one of `pattern`'s
/// (`/api/v1/nodes/{node}/labels`): each `{param}` segment stands for one non-empty segment.
pub fn matches(pattern: &str, path: &str) -> bool {
    let (mut want, mut got) = (pattern.split('/'), path.split('/'));
    loop {
        match (want.next(), got.next()) {
            (None, None) => return true,
            (Some(w), Some(g)) if w == g => {}
            (Some(w), Some(g)) if w.starts_with('{') && w.ends_with('}') && !g.is_empty() => {}
            _ => return false,
        }
    }
}
