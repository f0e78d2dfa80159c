//! The transaction formats (patchdiff-tx/1, tx/2, tx/3) and the sequential canonical buffer they
//! all apply through. `common` holds what every format shares, below all of them.

pub mod common;
pub mod sequential;
pub mod tx1;
pub mod tx2;
pub mod tx3;
