//! Where a reclaim case stands (docs/reclaim.md): noticed, waiting for an operator, approved,
//! acted on, and one of the ends the loop records. Parsed once where a state is read (the
//! store, an API query); compared as the type everywhere else.

use serde::{Deserialize, Serialize};

crate::closed_set! {
    /// A reclaim case's state, as the store, the API and the pages spell it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
    pub enum CaseState {
        Noticed = "noticed",
        AwaitingApproval = "awaiting_approval",
        Approved = "approved",
        Acted = "acted",
        Cancelled = "cancelled",
        Refused = "refused",
        Reported = "reported",
        DryRun = "dry_run",
        Failed = "failed",
        Freed = "freed",
        NotFreed = "not_freed",
    }
}

impl CaseState {
    /// The states in which a case is still the loop's business (an acted case waits for its
    /// outcome check).
    pub const OPEN: [CaseState; 4] = [
        CaseState::Noticed,
        CaseState::AwaitingApproval,
        CaseState::Approved,
        CaseState::Acted,
    ];

    /// The states in which the tenant has been told and nothing was done yet: what a cancel
    /// can still stop.
    pub const NOTIFIED: [CaseState; 3] = [
        CaseState::Noticed,
        CaseState::AwaitingApproval,
        CaseState::Approved,
    ];

    pub fn is_open(self) -> bool {
        CaseState::OPEN.contains(&self)
    }

    /// Its name for people: `awaiting approval`.
    pub fn words(self) -> String {
        self.as_str().replace('_', " ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_reads_back_from_its_name() {
        for s in CaseState::ALL {
            assert_eq!(CaseState::parse(s.as_str()), Some(s));
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.as_str())
            );
        }
        assert_eq!(CaseState::parse("Noticed"), None);
        assert_eq!(CaseState::AwaitingApproval.words(), "awaiting approval");
    }
}
