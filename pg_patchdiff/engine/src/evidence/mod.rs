//! What a rejection carries: its label, stage and diagnostic, bounded context, and near misses.

pub mod block;
pub mod drift;
pub mod near_miss;
pub mod rejection;
pub mod whitespace;
