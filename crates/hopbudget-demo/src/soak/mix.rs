//! The mix of requests the load generator sends, one kind of deadline trouble each.

/// The kinds of request in the mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// Plenty of budget, a little work: completes.
    Good,
    /// Less budget than the leaf's minimum: refused before work (C3).
    Short,
    /// Leaf work that outlives the budget: expires (C4).
    Expiring,
    /// Abandoned by the client mid-flight while budget remains (C5).
    Cancelled,
    /// An unreadable deadline header: rejected at the edge (C9).
    Malformed,
}

impl Kind {
    pub(super) const ALL: [Kind; 5] = [
        Kind::Good,
        Kind::Short,
        Kind::Expiring,
        Kind::Cancelled,
        Kind::Malformed,
    ];

    /// The mix: 6 good, 1 of each other kind, in a fixed rotation.
    pub(super) fn nth(i: u64) -> Kind {
        match i % 10 {
            0..=5 => Kind::Good,
            6 => Kind::Short,
            7 => Kind::Expiring,
            8 => Kind::Cancelled,
            _ => Kind::Malformed,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Good => "good",
            Kind::Short => "short",
            Kind::Expiring => "expiring",
            Kind::Cancelled => "cancelled",
            Kind::Malformed => "malformed",
        }
    }

    /// The deadline header the client sends, and the leaf work it asks for (ms).
    pub(super) fn request(self) -> (&'static str, u64) {
        match self {
            Kind::Good => ("1000", 5),
            // 60 ms at the edge is about 48 ms at the leaf, below its 50 ms minimum.
            Kind::Short => ("60", 5),
            Kind::Expiring => ("150", 400),
            Kind::Cancelled => ("3000", 1_000),
            Kind::Malformed => ("soon", 5),
        }
    }
}
