//! The tenants no batch may hold: a key that is not a name, a key repeating one before it, a
//! field that is not text. A producer takes those out ([`drop_impossible_tenants`]) rather than
//! have the collector refuse the batch, and every reading of the node with it: a Slurm task may
//! rewrite `SLURM_JOB_ACCOUNT` in its own environment to anything, and a user name in
//! `/etc/passwd` may hold any byte but `:` and a newline.

use super::batch::Snapshot;
use super::rows::keep;
use super::validate::{is_name, is_text, set_for};
use crate::Tenant;
use crate::tenant::TEXT_FIELDS;

/// What [`drop_impossible_tenants`] took out of one tenant.
#[derive(Debug, Clone, PartialEq)]
pub struct TakenFromTenant {
    /// The tenant's key as the producer had it, its first 64 characters (for a log line).
    pub tenant: String,
    /// The field cleared (`account`, `user`, …), or `key` when the tenant itself went.
    pub field: &'static str,
    pub why: String,
}

/// Drops from `tenants` each whose key is not a name or repeats one before it (the first
/// stays), clears each text field that is not text, and says what it took out. The
/// `snapshots`' processes attributed to a dropped key are sent unattributed; allocations
/// held by one are dropped with the rows no batch may hold
/// ([`Snapshot::drop_impossible_rows`], which also drops allocations whose tenant is not a
/// name). What stays is what validation's tenant checks take.
pub fn drop_impossible_tenants(
    tenants: &mut Vec<Tenant>,
    snapshots: &mut [Snapshot],
) -> Vec<TakenFromTenant> {
    // Which go, decided before any moves: the keys are compared where they lie. A dropped key
    // that is not a name is kept whole, for the processes that reference it; a repeated key's
    // first tenant stays, and with it what its processes reference.
    let mut seen = set_for(tenants.len());
    let mut unnamed = Vec::new();
    let verdicts: Vec<Option<TakenFromTenant>> = tenants
        .iter()
        .map(|t| {
            let why = if !is_name(&t.key) {
                unnamed.push(t.key.clone());
                "its key is not a name"
            } else if !seen.insert(t.key.as_str()) {
                "its key repeats a tenant's before it"
            } else {
                return None;
            };
            Some(TakenFromTenant {
                tenant: shortened(&t.key),
                field: "key",
                why: why.into(),
            })
        })
        .collect();
    let mut taken = Vec::new();
    keep(tenants, verdicts, &mut taken);
    for t in tenants.iter_mut() {
        for field in &TEXT_FIELDS {
            if (field.read)(t).is_some_and(|v| !is_text(v)) {
                (field.clear)(t);
                taken.push(TakenFromTenant {
                    tenant: shortened(&t.key),
                    field: field.name,
                    why: "not text: too long or holding control characters".into(),
                });
            }
        }
    }
    if !unnamed.is_empty() {
        let mut gone = set_for(unnamed.len());
        gone.extend(unnamed.iter().map(String::as_str));
        for p in snapshots.iter_mut().flat_map(|s| &mut s.processes) {
            if p.tenant.as_deref().is_some_and(|k| gone.contains(k)) {
                p.tenant = None;
            }
        }
    }
    taken
}

/// The first 64 characters of `key`, control characters escaped as `Debug` writes them.
fn shortened(key: &str) -> String {
    let head: String = key.chars().take(64).collect();
    let escaped = format!("{head:?}");
    escaped[1..escaped.len() - 1].to_owned()
}
