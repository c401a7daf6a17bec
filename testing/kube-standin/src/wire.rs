//! The API server's wire forms, as the stand-in writes and reads them: `metav1.Status`
//! errors, field selectors, merge patches, and where and how the served workload kinds are
//! kept and checked. Pure functions; the handlers in `lib.rs` use them.

use std::collections::{BTreeMap, BTreeSet};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A namespaced object's place: (`group/version`, plural, namespace, name).
pub type ObjectKey = (String, String, String, String);

/// The kinds served under `/apis`, by `group/version` and plural.
pub const KINDS: [(&str, &str, &str); 6] = [
    ("apps/v1", "deployments", "Deployment"),
    ("apps/v1", "replicasets", "ReplicaSet"),
    ("apps/v1", "statefulsets", "StatefulSet"),
    ("batch/v1", "jobs", "Job"),
    ("kueue.x-k8s.io/v1beta1", "workloads", "Workload"),
    ("resource.k8s.io/v1", "resourceclaims", "ResourceClaim"),
];

/// An error response, boxed so results stay small.
pub type Failure = Box<Response>;

/// A `metav1.Status` error response.
pub fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    (
        code,
        axum::Json(json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code.as_u16(),
        })),
    )
        .into_response()
}

pub fn not_found(kind: &str, name: &str) -> Response {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("{kind} \"{name}\" not found"),
    )
}

/// The value a `fieldSelector` demands for `field` (only `a=b` terms are supported).
pub fn selector<'a>(q: &'a BTreeMap<String, String>, field: &str) -> Option<&'a str> {
    q.get("fieldSelector")?
        .split(',')
        .find_map(|term| term.strip_prefix(field)?.strip_prefix('='))
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            let t = target.as_object_mut().expect("object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

pub fn has_directive(v: &Value) -> bool {
    match v {
        Value::Object(m) => m
            .iter()
            .any(|(k, v)| k.starts_with('$') || has_directive(v)),
        Value::Array(a) => a.iter().any(has_directive),
        _ => false,
    }
}

pub fn keys(v: &Value, field: &str) -> BTreeSet<String> {
    v["metadata"][field]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// 404 for a resource type the server does not have (a CRD not installed).
pub fn no_resource() -> Response {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        "the server could not find the requested resource",
    )
}

/// Where an object of a served kind is kept.
pub fn object_key(v: &Value) -> Option<ObjectKey> {
    let (api_version, kind) = (v["apiVersion"].as_str()?, v["kind"].as_str()?);
    let (_, plural, _) = KINDS
        .iter()
        .find(|(av, _, k)| *av == api_version && *k == kind)?;
    Some((
        api_version.into(),
        (*plural).into(),
        v["metadata"]["namespace"].as_str()?.into(),
        v["metadata"]["name"].as_str()?.into(),
    ))
}

/// Checks an object by deserializing it into its `k8s-openapi` type (Workloads: a spec).
pub fn check_object(plural: &str, v: &Value) -> Result<(), String> {
    use k8s_openapi::api::{apps::v1 as apps, batch::v1 as batch};
    let r = match plural {
        "deployments" => serde_json::from_value::<apps::Deployment>(v.clone()).map(drop),
        "replicasets" => serde_json::from_value::<apps::ReplicaSet>(v.clone()).map(drop),
        "statefulsets" => serde_json::from_value::<apps::StatefulSet>(v.clone()).map(drop),
        "jobs" => serde_json::from_value::<batch::Job>(v.clone()).map(drop),
        _ => {
            return if v["spec"].is_object() {
                Ok(())
            } else {
                Err("a Workload has a spec".into())
            };
        }
    };
    r.map_err(|e| format!("the object is not valid: {e}"))
}

/// Checks what would be stored: resource version, name, labels and the object's type.
pub fn validate<T: serde::de::DeserializeOwned>(
    current: &Value,
    body: &Value,
    next: &Value,
) -> Result<(), Failure> {
    if let Some(rv) = body["metadata"]["resourceVersion"].as_str()
        && Some(rv) != current["metadata"]["resourceVersion"].as_str()
    {
        return Err(Box::new(status(
            StatusCode::CONFLICT,
            "Conflict",
            "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again",
        )));
    }
    if next["metadata"]["name"] != current["metadata"]["name"] {
        return Err(Box::new(status(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "metadata.name: Invalid value: field is immutable",
        )));
    }
    for field in ["labels", "annotations"] {
        if let Some(m) = next["metadata"][field].as_object() {
            for (k, v) in m {
                let bad = |msg: String| {
                    Box::new(status(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "Invalid",
                        &format!("metadata.{field}: Invalid value: {msg}"),
                    ))
                };
                model::labels::check_syntax(k).map_err(|e| bad(e.to_string()))?;
                let Some(v) = v.as_str() else {
                    return Err(bad(format!("{k:?} must be a string")));
                };
                if field == "labels" {
                    model::labels::check_value(k, v).map_err(|e| bad(e.to_string()))?;
                }
            }
        }
    }
    serde_json::from_value::<T>(next.clone()).map_err(|e| {
        Box::new(status(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            &format!("the patched object is not valid: {e}"),
        ))
    })?;
    Ok(())
}

/// A request body's content type and JSON.
pub fn parse_body(headers: &HeaderMap, body: &Bytes) -> Result<(String, Value), Failure> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_owned();
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        Box::new(status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!("the request body is not JSON: {e}"),
        ))
    })?;
    Ok((ct, v))
}
