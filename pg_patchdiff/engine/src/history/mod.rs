//! A target's history: bounded log and ledger pages, replay, checkpoints and exports.

pub mod checkpoint;
pub mod export;
pub mod pages;
pub mod replay;
