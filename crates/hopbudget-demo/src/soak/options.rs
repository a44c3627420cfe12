//! What a soak run is given: the command line, and the options it validates to.

use std::time::Duration;

use super::overload::capacity_per_s;

/// `hopbudget-demo soak` arguments.
#[derive(Debug, clap::Args)]
pub struct SoakArgs {
    /// Seconds of load (then the chain drains and the checks run).
    #[arg(long, default_value_t = 600.0)]
    pub duration: f64,
    /// Requests per second sent to the edge (ignored with --overload).
    #[arg(long, default_value_t = 100.0)]
    pub rate: f64,
    /// Seconds at the start whose memory samples are warm-up (default: a quarter of the run,
    /// at least 2 and at most 120).
    #[arg(long)]
    pub warmup: Option<f64>,
    /// Overload mode: all good requests, the leaf at a fixed capacity, and this multiple of
    /// that capacity offered.
    #[arg(long, value_name = "FACTOR")]
    pub overload: Option<f64>,
}

/// What `run` needs, validated.
#[derive(Clone, Debug)]
pub struct SoakOptions {
    /// Length of the load.
    pub duration: Duration,
    /// Arrivals per second.
    pub rate: f64,
    /// Memory samples before this are warm-up.
    pub warmup: Duration,
    /// Overload factor, if in overload mode.
    pub overload: Option<f64>,
}

impl SoakOptions {
    /// Validate command-line arguments.
    pub fn from_args(args: &SoakArgs) -> Result<Self, String> {
        if !(args.duration.is_finite() && args.duration > 0.0 && args.duration <= 86_400.0) {
            return Err(format!(
                "--duration must be above 0 and at most 86400 s (got {})",
                args.duration
            ));
        }
        let rate = match args.overload {
            Some(f) if !(f.is_finite() && f > 0.0 && f <= 20.0) => {
                return Err(format!(
                    "--overload must be above 0 and at most 20 (got {f})"
                ));
            }
            Some(f) => f * capacity_per_s(),
            None if !(args.rate.is_finite() && args.rate > 0.0 && args.rate <= 20_000.0) => {
                return Err(format!(
                    "--rate must be above 0 and at most 20000 (got {})",
                    args.rate
                ));
            }
            None => args.rate,
        };
        let warmup = match args.warmup {
            Some(w) if !(w.is_finite() && w >= 0.0 && w < args.duration) => {
                return Err(format!(
                    "--warmup must be at least 0 and below --duration (got {w})"
                ));
            }
            Some(w) => w,
            None => (args.duration / 4.0).clamp(2.0f64.min(args.duration / 2.0), 120.0),
        };
        Ok(Self {
            duration: Duration::from_secs_f64(args.duration),
            rate,
            warmup: Duration::from_secs_f64(warmup),
            overload: args.overload,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_reject_nonsense() {
        let args = |duration, rate, overload| SoakArgs {
            duration,
            rate,
            warmup: None,
            overload,
        };
        assert!(SoakOptions::from_args(&args(0.0, 10.0, None)).is_err());
        assert!(SoakOptions::from_args(&args(10.0, f64::NAN, None)).is_err());
        assert!(SoakOptions::from_args(&args(10.0, 10.0, Some(-1.0))).is_err());
        let o = SoakOptions::from_args(&args(10.0, 10.0, Some(3.0))).unwrap();
        assert_eq!(o.rate, 3.0 * capacity_per_s());
        assert_eq!(o.warmup, Duration::from_millis(2500));
    }
}
