//! patchdiff-engine: the PatchDIFF edit engine.
//!
//! Pure Rust, no PostgreSQL, no I/O, no clock: it takes values and returns values. The
//! `pg_patchdiff` extension parses nothing and decides nothing itself; it locks, reads and
//! writes rows around the calls into this crate.

pub mod args;
pub mod json;
pub mod limits;
pub mod read;
pub mod rejection;
pub mod submit;
pub mod target;
pub mod text;
pub mod tx1;
pub mod uuid;
