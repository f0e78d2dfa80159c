//! A target's history: bounded log and ledger pages, replay, checkpoints, exports and the
//! change feed's announcements.

pub mod checkpoint;
pub mod export;
pub mod feed;
pub mod pages;
pub mod replay;
