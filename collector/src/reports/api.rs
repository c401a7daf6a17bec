//! `/api/v1/reports`: the stored weekly reports, and each one as HTML or CSV
//! (docs/reports.md).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use std::sync::Arc;

use super::{Settings, link};
use collector_shared::access::routes::{Need::*, Routes, Teams::*};
use collector_shared::error::ApiError;
use collector_shared::openapi::Op;
use collector_shared::shared::Shared;
use model::time::rfc3339;
use serde_json::json;

/// What the reports handlers need.
#[derive(Debug, Clone)]
pub struct ReportsState {
    pub shared: Shared,
    /// The `[reports]` settings (the time zone the API defaults to).
    pub reports: Arc<Settings>,
}

/// The reports routes (merged in `router.rs`).
pub fn routes() -> Routes<ReportsState> {
    Routes::new()
        .get("/api/v1/reports", Read(AllTeams), list_op(), list)
        .get(
            "/api/v1/reports/{week}",
            Read(AllTeams),
            get_op(),
            self::get,
        )
}

fn list_op() -> Op {
    Op::new("Stored weekly reports (docs/reports.md), newest week first: week, time zone, range, when generated, a summary, and links to the HTML and CSV.")
        .param(json!({"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 520}, "description": "Default 52."}))
        .json(200, "timezone, reports[] (week, timezone, from, to, generated, summary, html, csv)",
            json!({"type": "object", "properties": {"timezone": {"type": "string"}, "reports": {"type": "array"}}}))
        .refusals(&[400, 503])
}

fn get_op() -> Op {
    Op::new("One stored weekly report: a self-contained HTML file (inline SVG charts, prints on A4) or CSV with the columns docs/reports.md lists.")
        .param(json!({"name": "week", "in": "path", "required": true, "schema": {"type": "string", "pattern": "^[0-9]{4}-W[0-9]{2}$", "example": "2026-W46"}}))
        .query_enum("format", ["html", "csv"], Some("Default html."))
        .param(json!({"name": "timezone", "in": "query", "schema": {"type": "string"}, "description": "Default: the configured [reports] timezone."}))
        .response(200, json!({"description": "The report", "content": {"text/html": {}, "text/csv": {}}}))
        .refusals(&[400, 404, 503])
}

#[derive(Debug, Serialize)]
pub struct ReportEntry {
    pub week: String,
    pub timezone: String,
    pub from: String,
    pub to: String,
    pub generated: String,
    pub summary: String,
    pub html: String,
    pub csv: String,
}

#[derive(Debug, Serialize)]
pub struct ReportList {
    /// The time zone scheduled reports use.
    pub timezone: String,
    pub reports: Vec<ReportEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// At most this many, newest week first (default 52, at most 520).
    pub limit: Option<i64>,
}

pub async fn list(
    State(state): State<ReportsState>,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ReportList>, ApiError> {
    let Query(q) = q.map_err(collector_shared::http::bad_query)?;
    let limit = q.limit.unwrap_or(52);
    if !(1..=520).contains(&limit) {
        return Err(ApiError::BadRequest(format!(
            "limit must be between 1 and 520, got {limit}"
        )));
    }
    let reports = state
        .shared
        .store
        .reports(limit)
        .await?
        .into_iter()
        .map(|r| ReportEntry {
            html: link(None, &r.week, &r.timezone, "html"),
            csv: link(None, &r.week, &r.timezone, "csv"),
            from: rfc3339(r.from_ms),
            to: rfc3339(r.to_ms),
            generated: rfc3339(r.generated_ms),
            week: r.week,
            timezone: r.timezone,
            summary: r.summary,
        })
        .collect();
    Ok(Json(ReportList {
        timezone: state.reports.timezone.clone(),
        reports,
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetQuery {
    /// html (default) or csv.
    pub format: Option<String>,
    /// Default: the configured one.
    pub timezone: Option<String>,
}

/// One report as a download.
pub async fn get(
    State(state): State<ReportsState>,
    Path(week): Path<String>,
    q: Result<Query<GetQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q.map_err(collector_shared::http::bad_query)?;
    let w: super::week::IsoWeek = week.parse().map_err(ApiError::BadRequest)?;
    let tz = q
        .timezone
        .clone()
        .unwrap_or_else(|| state.reports.timezone.clone());
    let format = q.format.as_deref().unwrap_or("html");
    if !matches!(format, "html" | "csv") {
        return Err(ApiError::BadRequest(format!(
            "format must be html or csv, not {format:?}"
        )));
    }
    let Some(r) = state.shared.store.report(&w.to_string(), &tz).await? else {
        return Err(ApiError::NotFound(format!(
            "no report for {w} in {tz}; reports are made when a week is over, or with `gpulens report --week {w}`"
        )));
    };
    let (body, ct) = if format == "csv" {
        (r.csv, "text/csv; charset=utf-8; header=present")
    } else {
        (r.html, "text/html; charset=utf-8")
    };
    let name = format!("gpulens-report-{w}.{format}");
    Ok((
        [
            (header::CONTENT_TYPE, ct.to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("inline; filename=\"{name}\""),
            ),
        ],
        body,
    )
        .into_response())
}
