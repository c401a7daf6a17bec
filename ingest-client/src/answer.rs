//! What a collector's answer to a batch means, over a request or a stream alike.

use std::time::Duration;

/// What the collector said about a delivered batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivered {
    Stored {
        rows: u64,
    },
    /// The collector already had this sequence number.
    Duplicate,
}

/// Why a delivery failed.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// Worth retrying: the collector is down, slow, overloaded or asked us to wait.
    #[error("collector unavailable: {message}")]
    Retryable {
        message: String,
        retry_after: Option<Duration>,
    },
    /// Final: the collector refused this batch; sending it again cannot help.
    #[error("collector refused the batch ({status}): {message}")]
    Rejected { status: u16, message: String },
    /// The batch could not be encoded.
    #[error("cannot encode batch: {0}")]
    Encode(String),
}

/// What a collector's answer (its status and JSON body, or the body's text as a JSON string)
/// means for the batch, over a request or a stream alike.
pub(crate) fn answer_of(
    status: u16,
    answer: &serde_json::Value,
    retry_after: Option<Duration>,
) -> Result<Delivered, SendError> {
    match status {
        200..=299 => {
            if answer["status"] == "duplicate" {
                Ok(Delivered::Duplicate)
            } else {
                Ok(Delivered::Stored {
                    rows: answer["rows"].as_u64().unwrap_or(0),
                })
            }
        }
        408 | 429 | 500..=599 => Err(SendError::Retryable {
            message: format!("HTTP {status}: {}", error_message(answer)),
            retry_after,
        }),
        _ => Err(SendError::Rejected {
            status,
            message: error_message(answer),
        }),
    }
}

/// An answer's `Retry-After`, in seconds.
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// The `error.message` of a collector's JSON error, or the raw text.
fn error_message(answer: &serde_json::Value) -> String {
    match (answer["error"]["message"].as_str(), answer) {
        (Some(message), _) => message.to_owned(),
        (None, serde_json::Value::String(text)) => text.clone(),
        (None, other) => other.to_string().chars().take(500).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_are_extracted() {
        let json =
            serde_json::json!({"error": {"code": "bad_request", "message": "seq must start at 1"}});
        assert_eq!(error_message(&json), "seq must start at 1");
        assert_eq!(error_message(&"plain".into()), "plain");
    }
}
