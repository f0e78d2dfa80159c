//! patchdiff-engine: the PatchDIFF edit engine.
//!
//! Pure Rust, no PostgreSQL, no I/O, no clock: it takes values and returns values. The
//! `pg_patchdiff` extension parses nothing and decides nothing itself; it locks, reads and
//! writes rows around the calls into this crate.

// A `Rejection` (about 200 bytes: reason, detail, evidence map, contexts) is the expected answer
// to half of all submissions, not an exceptional path, and is built once per call; boxing it
// would add an allocation to every rejection for no measurable gain.
#![allow(clippy::result_large_err)]

pub mod args;
pub mod checkpoint;
pub mod drive;
pub mod export;
pub mod history;
pub mod interrupt;
pub mod invalid_text;
pub mod json;
pub mod limits;
pub mod lines;
pub mod near_miss;
pub mod observe;
pub mod observed;
pub mod occurrence;
pub mod preview;
pub mod read;
pub mod rejection;
pub mod replay;
pub mod scope;
pub mod sequential;
pub mod store;
pub mod submit;
pub mod target;
pub mod tenancy;
pub mod text;
pub mod tx1;
pub mod tx2;
pub mod tx3;
pub mod uuid;
pub mod warnings;
