//! The contract's shared vocabulary, below every tool: JSON as the contract counts it, its
//! limits, identifiers and timestamps, argument objects and their answers, invalid text in a
//! proposal, interrupt checks, and allocations whose failure is handled.

pub mod args;
pub mod interrupt;
pub mod invalid_text;
pub mod json;
pub mod limits;
pub mod memory;
#[cfg(test)]
pub mod rng;
pub mod time;
pub mod utf8;
pub mod uuid;
pub mod words;
