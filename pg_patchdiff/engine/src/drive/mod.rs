//! The engine drives each call: every SQL function's sequence (arguments, the target the caller
//! may reach, locks, checks in the contract's order, writes, the answer) runs here, over the
//! storage port ([`store`]) that the extension implements with SPI. The extension parses no
//! argument and decides nothing on these paths; it supplies rows, IDs and session facts.

pub mod changeset;
pub mod diff;
pub mod grants;
pub mod observation;
pub mod pages;
pub mod replay;
pub mod save;
pub mod store;
pub mod submission;
pub mod targets;
