//! The contract's format words: every `protocol_version` and `runtime_version` a record can
//! carry, as types. Stored rows and responses keep the exact strings (`as_str`); the engine
//! dispatches on the types.

use std::fmt;

/// A transaction format, by its `protocol_version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// `patchdiff-tx/1`: typed edits.
    Tx1,
    /// `patchdiff-tx/2`: guarded `match` and `span` operations (also the observed single form).
    Tx2,
    /// `patchdiff-tx/3`: one sole whole-target replacement.
    Tx3,
    /// `patchdiff-observed-batch/1`: groups of tx/2 operations against observations.
    ObservedBatch,
}

impl Protocol {
    pub const ALL: [Protocol; 4] = [
        Protocol::Tx1,
        Protocol::Tx2,
        Protocol::Tx3,
        Protocol::ObservedBatch,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Protocol::Tx1 => "patchdiff-tx/1",
            Protocol::Tx2 => "patchdiff-tx/2",
            Protocol::Tx3 => "patchdiff-tx/3",
            Protocol::ObservedBatch => "patchdiff-observed-batch/1",
        }
    }

    /// The protocol a stored or sent `protocol_version` names, if any.
    pub fn parse(s: &str) -> Option<Protocol> {
        Protocol::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A runtime profile, by its `runtime_version`. Profiles are immutable: a record replays under
/// the profile it was accepted under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Runtime {
    /// `patchdiff-mvp-0.2.2`: tx/1.
    Mvp0_2_2,
    /// `patchdiff-mvp-0.3.0`: tx/2 without span context.
    Mvp0_3_0,
    /// `patchdiff-mvp-0.4.0`: tx/3.
    Mvp0_4_0,
    /// `patchdiff-mvp-0.5.0`: tx/2 with span context.
    Mvp0_5_0,
    /// `patchdiff-observed-batch-r1`: the observed batch.
    ObservedBatchR1,
}

impl Runtime {
    pub const ALL: [Runtime; 5] = [
        Runtime::Mvp0_2_2,
        Runtime::Mvp0_3_0,
        Runtime::Mvp0_4_0,
        Runtime::Mvp0_5_0,
        Runtime::ObservedBatchR1,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Runtime::Mvp0_2_2 => "patchdiff-mvp-0.2.2",
            Runtime::Mvp0_3_0 => "patchdiff-mvp-0.3.0",
            Runtime::Mvp0_4_0 => "patchdiff-mvp-0.4.0",
            Runtime::Mvp0_5_0 => "patchdiff-mvp-0.5.0",
            Runtime::ObservedBatchR1 => "patchdiff-observed-batch-r1",
        }
    }

    /// The runtime a stored or sent `runtime_version` names, if any.
    pub fn parse(s: &str) -> Option<Runtime> {
        Runtime::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 16 item 2: the typed words serialize to the contract's exact strings, and parse
    /// back from them only.
    #[test]
    fn words_round_trip_to_the_contract_strings() {
        let protocols: Vec<&str> = Protocol::ALL.iter().map(|p| p.as_str()).collect();
        assert_eq!(
            protocols,
            [
                "patchdiff-tx/1",
                "patchdiff-tx/2",
                "patchdiff-tx/3",
                "patchdiff-observed-batch/1"
            ]
        );
        let runtimes: Vec<&str> = Runtime::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            runtimes,
            [
                "patchdiff-mvp-0.2.2",
                "patchdiff-mvp-0.3.0",
                "patchdiff-mvp-0.4.0",
                "patchdiff-mvp-0.5.0",
                "patchdiff-observed-batch-r1"
            ]
        );
        for p in Protocol::ALL {
            assert_eq!(Protocol::parse(p.as_str()), Some(p));
            assert_eq!(p.to_string(), p.as_str());
        }
        for r in Runtime::ALL {
            assert_eq!(Runtime::parse(r.as_str()), Some(r));
            assert_eq!(r.to_string(), r.as_str());
        }
        assert_eq!(Protocol::parse("patchdiff-tx/4"), None);
        assert_eq!(Protocol::parse("PATCHDIFF-TX/1"), None);
        assert_eq!(Runtime::parse("patchdiff-mvp-0.6.0"), None);
    }
}
