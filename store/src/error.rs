//! What went wrong in storage, in the terms callers act on.

/// What went wrong in storage, in the terms callers act on.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or is overloaded; retrying later may succeed.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The request cannot be served as asked (bad range, unknown entity, …).
    #[error("{0}")]
    BadRequest(String),
    /// The transaction lost to a concurrent one (PostgreSQL's deadlock detector, a
    /// serialization failure: SQLSTATE class 40) and was rolled back whole; the same work
    /// tried again succeeds.
    #[error("database conflict: {0}")]
    Conflict(String),
    #[error("database error: {0}")]
    Internal(String),
}

/// Times one transaction is tried when it keeps losing to concurrent ones.
pub(crate) const CONFLICT_TRIES: usize = 4;

/// Whether a transaction's `outcome` lost to a concurrent one ([`StoreError::Conflict`]:
/// rolled back whole, the winner holding its locks only until it commits) and is to be tried
/// again: up to [`CONFLICT_TRIES`] times in all, `tries` counting them; `what` names it in
/// the debug log.
pub(crate) fn try_again<T>(outcome: &Result<T>, tries: &mut usize, what: &str) -> bool {
    match outcome {
        Err(StoreError::Conflict(e)) if *tries < CONFLICT_TRIES => {
            tracing::debug!(error = %e, tries = *tries, "{what} lost to a concurrent transaction; trying again");
            *tries += 1;
            true
        }
        _ => false,
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        use sqlx::Error as E;
        match &e {
            E::Io(_) | E::PoolTimedOut | E::PoolClosed | E::Tls(_) | E::WorkerCrashed => {
                StoreError::Unavailable(e.to_string())
            }
            E::Database(db) => {
                // PostgreSQL: 08* connection exceptions, 53* insufficient resources,
                // 57P0x shutdown/crash/cannot-connect-now. SQLite: BUSY and LOCKED.
                let code = db.code().unwrap_or_default();
                if code.starts_with("08")
                    || code.starts_with("53")
                    || code.starts_with("57P")
                    || code == "5"
                    || code == "6"
                    || code == "517"
                {
                    StoreError::Unavailable(e.to_string())
                } else if code.starts_with("40") {
                    // 40001 serialization failure, 40P01 deadlock detected.
                    StoreError::Conflict(e.to_string())
                } else {
                    StoreError::Internal(e.to_string())
                }
            }
            _ => StoreError::Internal(e.to_string()),
        }
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Hides a password in a database URL for messages and logs.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let creds = &url[scheme_end + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_redacted() {
        assert_eq!(
            redact_url("postgres://u:secret@h/db"),
            "postgres://u:***@h/db"
        );
        assert_eq!(redact_url("sqlite://x.db"), "sqlite://x.db");
    }
}
