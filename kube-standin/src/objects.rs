//! Workload controllers and Kueue Workloads: kept by (`group/version`, plural, namespace,
//! name), got, listed in a namespace and merge-patched as the API server does.

use super::*;

/// A namespaced object's place: (`group/version`, plural, namespace, name).
pub(crate) type ObjectKey = (String, String, String, String);

/// The kinds served under `/apis`, by `group/version` and plural.
pub(crate) const KINDS: [(&str, &str, &str); 5] = [
    ("apps/v1", "deployments", "Deployment"),
    ("apps/v1", "replicasets", "ReplicaSet"),
    ("apps/v1", "statefulsets", "StatefulSet"),
    ("batch/v1", "jobs", "Job"),
    ("kueue.x-k8s.io/v1beta1", "workloads", "Workload"),
];

/// 404 for a resource type the server does not have (a CRD not installed).
pub(crate) fn no_resource() -> Response {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        "the server could not find the requested resource",
    )
}

/// Where an object of a served kind is kept.
pub(crate) fn object_key(v: &Value) -> Option<ObjectKey> {
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
pub(crate) fn check_object(plural: &str, v: &Value) -> Result<(), String> {
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

/// The served kind at `/apis/{group}/{version}/…/{plural}`, or 404.
pub(crate) fn served(
    s: &Shared,
    group: &str,
    version: &str,
    plural: &str,
) -> Result<String, Failure> {
    let api_version = format!("{group}/{version}");
    let known = KINDS
        .iter()
        .any(|(av, p, _)| *av == api_version && *p == plural);
    if !known || (plural == "workloads" && !s.lock().kueue) {
        return Err(Box::new(no_resource()));
    }
    Ok(api_version)
}

pub(crate) async fn list_objects(
    State(s): State<Shared>,
    Path((group, version, ns, plural)): Path<(String, String, String, String)>,
) -> Response {
    let api_version = match served(&s, &group, &version, &plural) {
        Ok(a) => a,
        Err(r) => return *r,
    };
    let kind = KINDS
        .iter()
        .find(|(_, p, _)| *p == plural)
        .map_or("", |k| k.2);
    let st = s.lock();
    let items: Vec<&Value> = st
        .objects
        .iter()
        .filter(|(k, _)| k.0 == api_version && k.1 == plural && k.2 == ns)
        .map(|(_, v)| v)
        .collect();
    axum::Json(json!({
        "apiVersion": api_version,
        "kind": format!("{kind}List"),
        "metadata": {"resourceVersion": st.rv.to_string()},
        "items": items,
    }))
    .into_response()
}

pub(crate) async fn get_object(
    State(s): State<Shared>,
    Path((group, version, ns, plural, name)): Path<(String, String, String, String, String)>,
) -> Response {
    let api_version = match served(&s, &group, &version, &plural) {
        Ok(a) => a,
        Err(r) => return *r,
    };
    match s
        .lock()
        .objects
        .get(&(api_version, plural.clone(), ns, name.clone()))
    {
        Some(v) => axum::Json(v.clone()).into_response(),
        None => not_found(&plural, &name),
    }
}

pub(crate) async fn patch_object(
    State(s): State<Shared>,
    Path((group, version, ns, plural, name)): Path<(String, String, String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let api_version = match served(&s, &group, &version, &plural) {
        Ok(a) => a,
        Err(r) => return *r,
    };
    let (ct, body) = match parse_body(&headers, &body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    if ct != "application/merge-patch+json" {
        return status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            &format!("the stand-in patches {plural} with merge patches, not {ct:?}"),
        );
    }
    let mut st = s.lock();
    st.requests.push((
        "PATCH".into(),
        format!("/apis/{api_version}/namespaces/{ns}/{plural}/{name}"),
        ct,
    ));
    let key = (api_version, plural.clone(), ns, name.clone());
    let Some(current) = st.objects.get(&key).cloned() else {
        return not_found(&plural, &name);
    };
    let mut next = current.clone();
    merge_patch(&mut next, &body);
    if let Err(r) = validate::<Value>(&current, &body, &next) {
        return *r;
    }
    if let Err(e) = check_object(&plural, &next) {
        return status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", &e);
    }
    st.rv += 1;
    next["metadata"]["resourceVersion"] = json!(st.rv.to_string());
    st.objects.insert(key, next.clone());
    axum::Json(next).into_response()
}
