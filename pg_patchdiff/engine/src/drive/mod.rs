//! The engine drives each call: the calls whose order the contract fixes (a submission, a SAVE,
//! a replay) run here, over the storage port ([`store`]) that the extension implements with
//! SPI. The extension parses no argument and decides nothing on these paths; it supplies rows,
//! IDs and session facts.

pub mod replay;
pub mod save;
pub mod store;
pub mod submission;
