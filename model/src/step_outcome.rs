//! The verdict of an applied step's outcome check: what the analytics conclude, and what the
//! dashboard and the weekly report show. Rules in docs/analytics.md.

use serde::{Deserialize, Serialize};

/// What the check concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Too few hours recorded since the change.
    Pending,
    AsPredicted,
    Better,
    Worse,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pending => "pending",
            Verdict::AsPredicted => "as_predicted",
            Verdict::Better => "better",
            Verdict::Worse => "worse",
        }
    }

    /// In words for pages and reports.
    pub fn words(self) -> &'static str {
        match self {
            Verdict::Pending => "pending",
            Verdict::AsPredicted => "as predicted",
            Verdict::Better => "better than predicted",
            Verdict::Worse => "worse than predicted",
        }
    }
}
