//! A target's history: bounded log and ledger pages, replay, checkpoints, exports and diffs.

pub mod checkpoint;
pub mod diff;
pub mod export;
pub mod pages;
pub mod replay;
pub mod unified;
