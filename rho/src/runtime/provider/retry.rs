//! When to try a model request again, and how long to wait first.
//!
//! Invariant: pure (no clock, no sleep): the caller sleeps for the delay this module
//! computes, so the policy is unit-tested without waiting.

use std::time::Duration;

/// The retry policy for model requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all (1 = no retry).
    pub max_attempts: u32,
    /// The first backoff delay; doubled per retry.
    pub base_delay: Duration,
    /// The largest backoff delay.
    pub max_delay: Duration,
    /// The longest `retry-after` honoured; a server asking for more ends the turn.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            max_retry_after: Duration::from_mins(2),
        }
    }
}

/// Whether an HTTP status is worth retrying: rate limits and server-side failures.
pub fn is_retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429 | 500 | 502 | 503 | 504 | 529)
}

/// Parses a `retry-after` header: delta seconds (fractions accepted). HTTP dates are not
/// honoured (they need a clock); they fall back to the backoff.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let seconds: f64 = value.trim().parse().ok()?;
    if seconds.is_finite() && seconds >= 0.0 {
        Some(Duration::from_secs_f64(seconds))
    } else {
        None
    }
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Wait this long, then try again.
    After(Duration),
    /// Stop: attempts exhausted.
    Exhausted,
    /// Stop: the server asked for a wait longer than the policy allows.
    TooLong(Duration),
}

impl RetryPolicy {
    /// The decision after attempt number `attempt` (1-based) failed retryably, with the
    /// server's `retry-after`, if any.
    pub fn decide(&self, attempt: u32, retry_after: Option<Duration>) -> RetryDecision {
        if attempt >= self.max_attempts {
            return RetryDecision::Exhausted;
        }
        if let Some(wait) = retry_after {
            if wait > self.max_retry_after {
                return RetryDecision::TooLong(wait);
            }
            return RetryDecision::After(wait);
        }
        let factor = 1u32 << (attempt - 1).min(16);
        RetryDecision::After(self.base_delay.saturating_mul(factor).min(self.max_delay))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_and_retry_after_wins() {
        let p = RetryPolicy {
            max_attempts: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(500),
            max_retry_after: Duration::from_secs(5),
        };
        assert_eq!(
            p.decide(1, None),
            RetryDecision::After(Duration::from_millis(100))
        );
        assert_eq!(
            p.decide(2, None),
            RetryDecision::After(Duration::from_millis(200))
        );
        assert_eq!(
            p.decide(4, None),
            RetryDecision::After(Duration::from_millis(500))
        );
        assert_eq!(
            p.decide(1, Some(Duration::from_secs(3))),
            RetryDecision::After(Duration::from_secs(3))
        );
        assert_eq!(
            p.decide(1, Some(Duration::from_secs(9))),
            RetryDecision::TooLong(Duration::from_secs(9))
        );
        assert_eq!(p.decide(10, None), RetryDecision::Exhausted);
    }

    #[test]
    fn retry_after_parses_seconds_only() {
        assert_eq!(parse_retry_after(" 2 "), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("-1"), None);
        assert!(is_retryable_status(429) && is_retryable_status(503));
        assert!(!is_retryable_status(400) && !is_retryable_status(401));
    }
}
