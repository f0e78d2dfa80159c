//! A target's history: bounded log and ledger pages, replay, checkpoints, exports, diffs and
//! the change feed's announcements.

pub mod checkpoint;
pub mod diff;
pub mod export;
pub mod feed;
pub mod pages;
pub mod replay;
pub mod unified;
