//! The tenants no batch may hold: a key that is not a name, a key repeating one before it, a
//! field that is not text. A producer takes those out ([`drop_impossible_tenants`]) rather than
//! have the collector refuse the batch, and every reading of the node with it: a Slurm task may
//! rewrite `SLURM_JOB_ACCOUNT` in its own environment to anything, and a user name in
//! `/etc/passwd` may hold any byte but `:` and a newline.

use super::batch::Snapshot;
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
    let mut taken = Vec::new();
    let mut seen = set_for(tenants.len());
    tenants.retain_mut(|t| {
        let why = if !is_name(&t.key) {
            "its key is not a name"
        } else if !seen.insert(t.key.clone()) {
            "its key repeats a tenant's before it"
        } else {
            for field in TEXT_FIELDS {
                if (field.read)(t).is_some_and(|v| !is_text(v)) {
                    (field.clear)(t);
                    taken.push(TakenFromTenant {
                        tenant: shortened(&t.key),
                        field: field.name,
                        why: "not text: too long or holding control characters".into(),
                    });
                }
            }
            return true;
        };
        taken.push(TakenFromTenant {
            tenant: shortened(&t.key),
            field: "key",
            why: why.into(),
        });
        false
    });
    for s in snapshots {
        for p in &mut s.processes {
            if p.tenant.as_deref().is_some_and(|k| !is_name(k)) {
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
