//! Every route is declared once, with what it needs and how it is described: a feature's
//! `routes()` builds a [`Routes`] of (method, path, need, description, handler), from which come
//! the axum router, the access table the middleware ([`super::enforce`]) looks each request up
//! in before any handler runs, and the OpenAPI document (`crate::openapi`). A route cannot be
//! served without a rule, nor under `/api/` without its operation.

use axum::Router;
use axum::handler::Handler;
use axum::routing::MethodRouter;

use crate::openapi::{Doc, Documented, Op};

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
    /// An operator: approves and applies label actions, decides reclaim cases. `Teams` says
    /// what a team-scoped operator may change: `Filtered`, only objects of its teams (the
    /// handler checks the object's team and answers 404 for another team's, as for an unknown
    /// id); `AllTeams`, nothing (the change reaches every team's tenants: a node's labels).
    Operate(Teams),
}

impl Need {
    /// The OpenAPI security scheme of the token a route with this need asks for; reads name
    /// none (a token is needed only where sign-in is on: the document's description says so).
    pub fn scheme(self) -> Option<&'static str> {
        match self {
            Need::Agent => Some("agentToken"),
            Need::Operate(_) => Some("operatorToken"),
            Need::Public | Need::Scrape | Need::Read(_) => None,
        }
    }
}

/// What a route shows of tenants, or changes of them, for people scoped to some teams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Teams {
    /// The handler shows a scoped caller only its teams' tenants (and fleet totals), or lets
    /// it change only its teams' objects.
    Filtered,
    /// Nothing per tenant: anyone who may read may see it.
    NoTenants,
    /// Every team's tenants at once (shown or changed): refused to scoped callers.
    AllTeams,
}

#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub method: &'static str,
    pub path: &'static str,
    pub need: Need,
    /// Whether the OpenAPI document describes it.
    pub documented: bool,
}

/// Routes, their rules and their operations, built together so none can lack the others.
pub struct Routes<S = ()> {
    router: Router<S>,
    rules: Vec<Rule>,
    ops: Vec<(Rule, Op)>,
}

impl<S: Clone + Send + Sync + 'static> Default for Routes<S> {
    fn default() -> Self {
        Routes {
            router: Router::new(),
            rules: Vec::new(),
            ops: Vec::new(),
        }
    }
}

impl<S: Clone + Send + Sync + 'static> Routes<S> {
    pub fn new() -> Self {
        Self::default()
    }

    /// `GET` (and `HEAD`) of `path`, for callers with `need`, described by `doc`.
    pub fn get<H, T>(self, path: &'static str, need: Need, doc: impl Into<Doc>, handler: H) -> Self
    where
        H: Handler<T, S>,
        T: 'static,
    {
        self.add("GET", path, need, doc.into(), axum::routing::get(handler))
    }

    /// `POST` of `path`, for callers with `need`, described by `doc`.
    pub fn post<H, T>(self, path: &'static str, need: Need, doc: impl Into<Doc>, handler: H) -> Self
    where
        H: Handler<T, S>,
        T: 'static,
    {
        self.add("POST", path, need, doc.into(), axum::routing::post(handler))
    }

    fn add(
        mut self,
        method: &'static str,
        path: &'static str,
        need: Need,
        doc: Doc,
        handler: MethodRouter<S>,
    ) -> Self {
        self.refuse_twice(method, path);
        let rule = Rule {
            method,
            path,
            need,
            documented: matches!(doc, Doc::Api(_)),
        };
        match doc {
            Doc::Api(op) => self.ops.push((rule, op)),
            // The API is for programs: each of its routes is in the document.
            Doc::Page => assert!(
                !path.starts_with("/api/"),
                "{method} {path} has no operation"
            ),
        }
        self.rules.push(rule);
        self.router = self.router.route(path, handler);
        self
    }

    /// These routes served with `state`.
    pub fn with_state<S2>(self, state: S) -> Routes<S2> {
        Routes {
            router: self.router.with_state(state),
            rules: self.rules,
            ops: self.ops,
        }
    }

    pub fn merge(mut self, other: Routes<S>) -> Self {
        for r in &other.rules {
            self.refuse_twice(r.method, r.path);
        }
        self.router = self.router.merge(other.router);
        self.rules.extend(other.rules);
        self.ops.extend(other.ops);
        self
    }

    /// A route declared twice is a programming error, found at start.
    fn refuse_twice(&self, method: &str, path: &str) {
        assert!(
            !self
                .rules
                .iter()
                .any(|r| r.method == method && r.path == path),
            "{method} {path} declared twice"
        );
    }

    /// The access table of these routes.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The described routes with their operations, in declaration order.
    pub fn operations(&self) -> impl Iterator<Item = Documented<'_>> {
        self.ops.iter().map(|(rule, op)| Documented {
            method: rule.method,
            path: rule.path,
            scheme: rule.need.scheme(),
            op,
        })
    }

    pub fn into_parts(self) -> (Router<S>, Vec<Rule>) {
        (self.router, self.rules)
    }
}

/// The rule for a request; HEAD is answered as GET.
pub fn find<'t>(table: &'t [Rule], method: &str, path: &str) -> Option<&'t Rule> {
    let method = if method == "HEAD" { "GET" } else { method };
    table.iter().find(|r| r.method == method && r.path == path)
}

/// Whether some method of `path` has a rule (another method then gets the router's 405).
pub fn known_path(table: &[Rule], path: &str) -> bool {
    table.iter().any(|r| r.path == path)
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
