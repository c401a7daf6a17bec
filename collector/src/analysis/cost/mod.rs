//! Cost exports of a range, read from the hour rollups: FOCUS rows (one per tenant, GPU and
//! UTC day; [`analytics::focus`]) for `GET /api/v1/cost/focus` and `gpulens cost`. Mapping and
//! rules in docs/cost.md.

pub mod api;

use analytics::focus::{COLUMNS, Charge, cells};
use store::{Scope, Store};

use super::Span;

const DAY_MS: i64 = 86_400_000;

/// The longest range one export covers: a month of days (a billing period).
pub const MAX_RANGE_MS: i64 = 31 * DAY_MS;

/// The most rows one export writes (about 600 MB of CSV): a month of 16,000 GPUs held by two
/// tenants each. A larger one is refused, naming the cluster filter and a shorter range.
pub const MAX_ROWS: usize = 1_000_000;

/// What an export is limited to.
#[derive(Debug, Default, Clone)]
pub struct Only {
    pub cluster: Option<String>,
    pub team: Option<String>,
    /// A team-scoped caller's teams: rows of other teams are left out.
    pub teams: Option<std::collections::BTreeSet<String>>,
}

impl Only {
    fn keeps(&self, c: &Charge) -> bool {
        self.team.as_ref().is_none_or(|t| *t == c.team)
            && self.teams.as_ref().is_none_or(|ts| ts.contains(&c.team))
    }
}

/// Why an export was refused.
#[derive(Debug)]
pub enum Refused {
    /// The range or the result is out of bounds; says which and what to do.
    Bounds(String),
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for Refused {
    fn from(e: anyhow::Error) -> Refused {
        Refused::Failed(e)
    }
}

/// An export's range as asked for (RFC 3339, Unix ms, `now-7d`): `to` by default the start of
/// the current UTC day, `from` 7 days before `to`. A time that does not parse is named:
/// (`"from"` or `"to"`, why).
pub fn range(
    from: Option<&str>,
    to: Option<&str>,
    now: i64,
) -> Result<(i64, i64), (&'static str, String)> {
    let parse = |which, t| intake::query::parse_time(t, now).map_err(|e| (which, e));
    let to = match to {
        Some(t) => parse("to", t)?,
        None => now.div_euclid(DAY_MS) * DAY_MS,
    };
    let from = match from {
        Some(f) => parse("from", f)?,
        None => to - 7 * DAY_MS,
    };
    Ok((from, to))
}

/// Checks a range: `from` before `to`, at most [`MAX_RANGE_MS`] long.
pub fn check_range(from: i64, to: i64) -> Result<(), Refused> {
    if from >= to {
        return Err(Refused::Bounds("`from` must be before `to`".into()));
    }
    if to - from > MAX_RANGE_MS {
        return Err(Refused::Bounds(format!(
            "a cost export covers at most 31 days (a billing period), not {:.1}; export month by month",
            (to - from) as f64 / DAY_MS as f64
        )));
    }
    Ok(())
}

/// The charges of [from, to) that `only` keeps, read from the hour rollups.
pub async fn charges(
    store: &Store,
    cfg: &analytics::Config,
    from: i64,
    to: i64,
    only: &Only,
) -> Result<Vec<Charge>, Refused> {
    check_range(from, to)?;
    let mut input = super::load_inventory(store, Span::closed(from, to)).await?;
    let scope = only.cluster.as_deref().map_or(Scope::Fleet, Scope::Cluster);
    (input.gpu_hours, input.tenant_hours) = store
        .hour_series(scope, input.from_ms, input.to_ms)
        .await
        .map_err(anyhow::Error::from)?;
    let holdings = analytics::holdings::take_holdings(&mut input);
    let rows: Vec<Charge> = analytics::focus::charges(&input, &holdings, cfg)
        .into_iter()
        .filter(|c| only.keeps(c))
        .collect();
    if rows.len() > MAX_ROWS {
        return Err(Refused::Bounds(format!(
            "the export would have {} rows, more than {MAX_ROWS}: export a shorter range, or one cluster (cluster=)",
            rows.len()
        )));
    }
    Ok(rows)
}

/// The rows as CSV (RFC 4180): FOCUS' column names, then one line per charge. Text cells go
/// through the spreadsheet-safe writer ([`web::csv::field`]); numbers and times are written
/// as FOCUS types them.
pub fn csv(rows: &[Charge], currency: &str) -> String {
    let header: Vec<&str> = COLUMNS.iter().map(|c| c.name).collect();
    let mut out = String::with_capacity(rows.len() * 700 + 600);
    out.push_str(&header.join(","));
    out.push_str("\r\n");
    for r in rows {
        let line: Vec<String> = cells(r, currency)
            .into_iter()
            .zip(COLUMNS)
            .map(|(v, c)| match (v, c.kind) {
                (None, _) => String::new(),
                (Some(v), analytics::focus::Kind::Decimal) => v,
                (Some(v), _) => web::csv::field(&v),
            })
            .collect();
        out.push_str(&line.join(","));
        out.push_str("\r\n");
    }
    out
}
