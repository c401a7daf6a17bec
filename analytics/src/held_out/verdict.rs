//! What held-out replay says of a step and of the plan: a step's verdict, with its figures and
//! why, and the fleet's score with the sentence the pages, `gpulens analyze` and the weekly
//! report use ([`super`] makes them).

use serde::{Deserialize, Serialize};

/// What became of a step's twin on the part it did not see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Held,
    Failed,
    /// The plan made without the held-out part has no such step.
    NoTwin,
}

impl HeldOut {
    /// The result as a page's figures: (what, value); `why` is said apart.
    pub fn figures(&self) -> Vec<(String, String)> {
        vec![
            ("verdict".into(), self.verdict.as_str().into()),
            ("hours replayed".into(), self.hours.to_string()),
            (
                "memory overflow tenant-hours".into(),
                format!("{:.0}", self.memory_overflow_hours),
            ),
            (
                "contended tenant-hours added".into(),
                format!("{:.0}", self.contention_hours_added),
            ),
        ]
    }
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Held => "held",
            Verdict::Failed => "failed",
            Verdict::NoTwin => "no twin",
        }
    }
}

/// A step's held-out result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldOut {
    pub verdict: Verdict,
    /// Hours of the held-out part replayed.
    pub hours: usize,
    /// Tenant-hours whose memory would not have fitted.
    pub memory_overflow_hours: f64,
    /// Tenant-hours contended beyond where the tenants ran.
    pub contention_hours_added: f64,
    /// A tenant the step reclaims worked again.
    pub working_again: bool,
    /// The result in words.
    pub why: String,
}

/// The fleet's held-out score.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// The held-out part: [split, to).
    pub split_ms: i64,
    pub to_ms: i64,
    /// Steps of the plan made without it, and those that held on it.
    pub steps: usize,
    pub steps_held: usize,
    /// GPUs those steps free, and those freed by steps that held.
    pub gpus_freed: f64,
    pub gpus_held: f64,
    /// Why there is no score (turned off, too little history).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Score {
    /// Share of the steps that held; None without steps.
    pub fn steps_ratio(&self) -> Option<f64> {
        (self.steps > 0).then(|| self.steps_held as f64 / self.steps as f64)
    }

    /// Share of the freed GPUs whose steps held; None when the steps free none.
    pub fn gpus_ratio(&self) -> Option<f64> {
        (self.gpus_freed > 0.0).then(|| self.gpus_held / self.gpus_freed)
    }

    /// The score in one sentence, as the plan's page, `gpulens analyze` and the weekly report
    /// say it.
    pub fn sentence(&self) -> String {
        if let Some(n) = &self.note {
            return format!("Held-out replay: {n}.");
        }
        let stamp = model::time::rfc3339(self.split_ms);
        let day = format!("{} {} UTC", &stamp[..10], &stamp[11..16]);
        let (Some(steps), gpus) = (self.steps_ratio(), self.gpus_ratio()) else {
            return format!(
                "Held-out replay: the plan made without the hours from {day} has no step to test on them."
            );
        };
        let failed = self.steps - self.steps_held;
        format!(
            "Tested on hours it did not see: the plan made without the hours from {day} had {}; {} held on them ({:.0} %){}{}.",
            model::figures::count(self.steps as f64, "step", "steps"),
            self.steps_held,
            steps * 100.0,
            gpus.map(|g| format!(
                ", freeing {:.0} of their {:.0} GPUs ({:.0} %)",
                self.gpus_held,
                self.gpus_freed,
                g * 100.0
            ))
            .unwrap_or_default(),
            if failed > 0 {
                format!(
                    "; {} did not — each step's page says whether its twin held and why",
                    model::figures::count(failed as f64, "step", "steps")
                )
            } else {
                String::new()
            }
        )
    }

    /// Adds another part's score (clusters analysed apart); a note stays where no part had
    /// steps.
    pub fn absorb(&mut self, o: &Score) {
        self.steps += o.steps;
        self.steps_held += o.steps_held;
        self.gpus_freed += o.gpus_freed;
        self.gpus_held += o.gpus_held;
        self.split_ms = self.split_ms.max(o.split_ms);
        self.to_ms = self.to_ms.max(o.to_ms);
        if self.note.is_some() && o.note.is_none() {
            self.note = None;
        }
    }
}
