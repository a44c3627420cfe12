//! How a hop ends when it does not answer: [`HopError`], the one error every mode, the
//! client and the wire share, and the terminal status it stands for.

use hopbudget::{BudgetError, Outcome};

/// How a hop failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HopError {
    /// A budget stopped it: refused before work (C3), expired (C4) or cancelled (C5), here
    /// or, as the reply said, below.
    Budget(BudgetError),
    /// A per-hop fresh timeout fired (`timeouts` and `detached` modes: there is no budget).
    TimedOut,
    /// A malformed deadline header (C9).
    Malformed(String),
    /// Anything else.
    Failed(String),
}

impl HopError {
    /// The terminal status this error stands for; application failures are `completed`
    /// (the hop ended on time, whatever it answered).
    pub fn outcome(&self) -> Outcome {
        match self {
            HopError::Budget(e) => e.outcome(),
            HopError::TimedOut => Outcome::Expired,
            HopError::Malformed(_) | HopError::Failed(_) => Outcome::Completed,
        }
    }
}

/// The terminal status of a hop's result.
pub fn outcome_of<T>(result: &Result<T, HopError>) -> Outcome {
    result
        .as_ref()
        .err()
        .map_or(Outcome::Completed, HopError::outcome)
}

/// Whether a hop's result is an application failure (not a deadline outcome).
pub fn failed<T>(result: &Result<T, HopError>) -> bool {
    matches!(result, Err(HopError::Malformed(_) | HopError::Failed(_)))
}
