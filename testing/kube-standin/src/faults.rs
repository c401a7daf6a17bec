//! Failures the stand-in answers in place of serving a request, for tests of what a client
//! does when the API server errs mid-way ([`StandIn::fail`]).

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// A failure the stand-in answers once, in place of the request it matches: a request whose
/// method is `method`, whose path and query contain `target`, and whose body contains `body`
/// (when given) is answered with a 500 `metav1.Status`, after `skip` such requests were served.
#[derive(Debug, Clone)]
pub struct Fault {
    pub method: &'static str,
    pub target: String,
    pub body: Option<String>,
    pub skip: usize,
}

/// The faults still to be met.
#[derive(Debug, Clone, Default)]
pub(crate) struct Faults(Arc<Mutex<Vec<Fault>>>);

impl Faults {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Fault>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn push(&self, f: Fault) {
        self.lock().push(f);
    }

    pub(crate) fn pending(&self) -> usize {
        self.lock().len()
    }
}

/// A `metav1.Status` failure, as the API server writes one.
fn failure(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Answers a request a [`Fault`] matches with a 500 instead of serving it.
pub(crate) async fn answer(
    State(faults): State<Faults>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if faults.pending() == 0 {
        return next.run(req).await;
    }
    let target = req
        .uri()
        .path_and_query()
        .map_or_else(String::new, |p| p.as_str().to_owned());
    let method = req.method().as_str().to_owned();
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 16 << 20).await else {
        return failure(StatusCode::PAYLOAD_TOO_LARGE, "TooLarge", "body too large");
    };
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let hit = {
        let mut st = faults.lock();
        let found = st.iter_mut().position(|f| {
            f.method == method
                && target.contains(&f.target)
                && f.body.as_ref().is_none_or(|b| text.contains(b))
        });
        match found {
            Some(i) if st[i].skip == 0 => {
                st.remove(i);
                true
            }
            Some(i) => {
                st[i].skip -= 1;
                false
            }
            None => false,
        }
    };
    if hit {
        return failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            &format!("the stand-in was told to fail {method} {target}"),
        );
    }
    next.run(axum::extract::Request::from_parts(parts, Body::from(bytes)))
        .await
}
