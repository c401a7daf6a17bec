//! The OpenAPI 3.1 document, assembled from the route declarations: each API route is declared
//! with its operation ([`Op`]) beside its handler and access rule (`access::routes`), and
//! [`document`] puts the paths together in declaration order. What the access rule implies is
//! not written twice: the route's rule names its security scheme (`Need::scheme`). The types'
//! schemas (`components.json`) are written by hand; see
//! ARCHITECTURE.md ("Written here on purpose") for why.

use serde_json::{Map, Value, json};

/// The schemas, security schemes and shared responses the operations refer to.
const COMPONENTS: &str = include_str!("components.json");

const DESCRIPTION: &str = "Ingest (wire protocol v1, see docs/ingest.md) and the read API. \
Times in responses are RFC 3339 (UTC); ratios are 0-1; absent measurements are null, never 0. \
Every error is {\"error\": {\"code\", \"message\"}}. When the collector requires sign-in, reads \
need a bearer token (readToken): without one 401 with WWW-Authenticate: Bearer, 403 when the \
token's role or team scope does not cover the route (docs/security.md).";

/// What a route declares about itself for the document.
#[derive(Debug, Clone)]
pub enum Doc {
    /// Part of the API: described by its operation.
    Api(Op),
    /// A page for people (the dashboard, sign-in): not in the document.
    Page,
}

impl From<Op> for Doc {
    fn from(op: Op) -> Doc {
        Doc::Api(op)
    }
}

/// One operation: its summary, parameters, request body and responses (an OpenAPI Operation
/// Object without its security, which comes from the route's access rule).
#[derive(Debug, Clone)]
pub struct Op(Map<String, Value>);

impl Op {
    pub fn new(summary: &str) -> Op {
        let mut op = Map::new();
        op.insert("summary".into(), summary.into());
        op.insert("responses".into(), Value::Object(Map::new()));
        Op(op)
    }

    /// A parameter object as OpenAPI writes it.
    pub fn param(mut self, parameter: Value) -> Op {
        let list = self.0.entry("parameters").or_insert_with(|| json!([]));
        list.as_array_mut()
            .expect("parameters is a list")
            .push(parameter);
        self
    }

    /// Several parameters shared by routes (see [`window`]).
    pub fn params(self, parameters: impl IntoIterator<Item = Value>) -> Op {
        parameters.into_iter().fold(self, Op::param)
    }

    /// A query parameter of type string with one of `values`.
    pub fn query_enum<'a>(
        self,
        name: &str,
        values: impl IntoIterator<Item = &'a str>,
        description: Option<&str>,
    ) -> Op {
        let values: Vec<&str> = values.into_iter().collect();
        let mut p =
            json!({"name": name, "in": "query", "schema": {"type": "string", "enum": values}});
        if let Some(d) = description {
            p["description"] = d.into();
        }
        self.param(p)
    }

    pub fn body(mut self, request_body: Value) -> Op {
        self.0.insert("requestBody".into(), request_body);
        self
    }

    /// The response for `status` (a Response Object).
    pub fn response(mut self, status: u16, response: Value) -> Op {
        self.0["responses"]
            .as_object_mut()
            .expect("responses is an object")
            .insert(status.to_string(), response);
        self
    }

    /// A JSON answer with `schema`.
    pub fn json(self, status: u16, description: &str, schema: Value) -> Op {
        self.response(
            status,
            json!({"description": description, "content": {"application/json": {"schema": schema}}}),
        )
    }

    /// Refusals answered with the API's JSON error.
    pub fn refusals(self, statuses: &[u16]) -> Op {
        statuses.iter().fold(self, |op, s| {
            op.response(*s, json!({"$ref": "#/components/responses/Error"}))
        })
    }

    /// 429 for a caller that sent too many wrong tokens (`who`: "agent tokens" or "tokens").
    pub fn throttled(self, who: &str) -> Op {
        self.response(
            429,
            json!({
                "description": format!("Too many wrong {who} from this address (or from everywhere at once): a wrong token is answered so until Retry-After seconds have passed; a right one always passes"),
                "headers": {"Retry-After": {"schema": {"type": "integer"}}},
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
            }),
        )
    }

    /// The operation as OpenAPI writes it, without its security.
    pub fn to_json(&self) -> Value {
        Value::Object(self.0.clone())
    }

    /// The operation object for a route that asks for the bearer token of `scheme`.
    fn with_security(&self, scheme: Option<&str>) -> Value {
        let mut op = self.0.clone();
        if let Some(s) = scheme {
            op.insert("security".into(), json!([{ s: [] }]));
        }
        Value::Object(op)
    }
}

/// `from` and `to` of an analysis computed on demand for the range.
pub fn window() -> [Value; 2] {
    [
        json!({"name": "from", "in": "query", "schema": {"type": "string", "minLength": 1}, "description": "Analyse this range on demand instead of serving the newest scheduled analysis: RFC 3339, Unix ms, `now-7d`."}),
        json!({"name": "to", "in": "query", "schema": {"type": "string", "minLength": 1}, "description": "End of the on-demand range (default now)."}),
    ]
}

/// A route as the document sees it.
pub struct Documented<'r> {
    pub method: &'static str,
    pub path: &'static str,
    /// The security scheme of the token it asks for (`components.json`), if any.
    pub scheme: Option<&'static str>,
    pub op: &'r Op,
}

/// What the listener answers for any route before its handler runs (`crate::listener`,
/// `crate::admission`, bounded by `crate::request_limits`): a request target past its limit,
/// a request slower than the timeout, a body a request without a credential may not send,
/// every slot of its class taken.
fn listener_answers() -> [(u16, String); 4] {
    [
        (
            408,
            "The request took longer than the collector's request timeout (a slow body counts too)"
                .into(),
        ),
        (
            413,
            format!(
                "A request without a credential declared a body over {} bytes, or none of declared length",
                crate::request_limits::ANONYMOUS_MAX_BODY
            ),
        ),
        (
            414,
            format!(
                "The request target (path and query) is longer than {} bytes",
                crate::request_limits::MAX_URI_BYTES
            ),
        ),
        (
            503,
            "The collector is serving as many requests of this kind as it takes (Retry-After), or its database is unavailable".into(),
        ),
    ]
}

/// Adds the listener's answers to an operation that does not describe them itself.
fn with_listener_answers(op: &mut Value) {
    let responses = op["responses"]
        .as_object_mut()
        .expect("responses is an object");
    for (status, description) in listener_answers() {
        responses.entry(status.to_string()).or_insert_with(|| {
            json!({
                "description": description,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
            })
        });
    }
}

/// The document for the declared operations, in declaration order.
pub fn document<'r>(operations: impl IntoIterator<Item = Documented<'r>>) -> Value {
    let mut paths = Map::new();
    for route in operations {
        let item = paths
            .entry(route.path)
            .or_insert_with(|| Value::Object(Map::new()));
        let mut op = route.op.with_security(route.scheme);
        with_listener_answers(&mut op);
        item[route.method.to_lowercase()] = op;
    }
    let components: Value =
        serde_json::from_str(COMPONENTS).expect("openapi/components.json is JSON");
    json!({
        "openapi": "3.1.0",
        "info": {"title": "gpulens collector API", "version": "1", "description": DESCRIPTION},
        "paths": paths,
        "components": components,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `$ref` in `v`.
    fn refs<'v>(v: &'v Value, out: &mut Vec<&'v str>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    out.push(r);
                }
                m.values().for_each(|x| refs(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }

    #[test]
    fn the_components_refer_only_to_themselves() {
        let components: Value = serde_json::from_str(COMPONENTS).unwrap();
        let mut found = Vec::new();
        refs(&components, &mut found);
        for r in found {
            let pointer = r.strip_prefix("#/components").expect("a local reference");
            assert!(components.pointer(pointer).is_some(), "{r} is not defined");
        }
    }

    #[test]
    fn every_security_scheme_named_is_defined() {
        let components: Value = serde_json::from_str(COMPONENTS).unwrap();
        for scheme in ["agentToken", "operatorToken", "readToken"] {
            assert!(
                components["securitySchemes"][scheme].is_object(),
                "{scheme}"
            );
        }
        let op = Op::new("x").with_security(Some("agentToken"));
        assert_eq!(op["security"], json!([{"agentToken": []}]));
    }

    /// Schemathesis sent a 14,621-byte query to /api/v1/cost/focus and got the listener's 414,
    /// which the operation did not document. Every operation now documents what the listener
    /// answers for any route, and keeps its own description where it has one.
    #[test]
    fn every_operation_documents_what_the_listener_answers_for_any_route() {
        let own_503 = Op::new("with its own 503").response(503, json!({"description": "mine"}));
        let plain = Op::new("plain").json(200, "ok", json!({"type": "object"}));
        let doc = document([
            Documented {
                method: "GET",
                path: "/a",
                scheme: None,
                op: &own_503,
            },
            Documented {
                method: "POST",
                path: "/b",
                scheme: Some("readToken"),
                op: &plain,
            },
        ]);
        for (path, method) in [("/a", "get"), ("/b", "post")] {
            let responses = &doc["paths"][path][method]["responses"];
            for status in ["408", "413", "414", "503"] {
                assert!(
                    responses[status].is_object(),
                    "{path} {status}: {responses}"
                );
            }
        }
        assert_eq!(
            doc["paths"]["/a"]["get"]["responses"]["503"]["description"],
            "mine"
        );
        assert!(
            doc["paths"]["/b"]["post"]["responses"]["414"]["description"]
                .as_str()
                .unwrap()
                .contains("8192 bytes")
        );
        assert!(doc["paths"]["/b"]["post"]["responses"]["200"].is_object());
    }
}
