//! The submission tools: the pipeline every submission shares (`submit`), advisory previews,
//! the submission answers as types (`respond`), and scoped submissions against issued observations (`scoped`).

pub mod changeset;
pub mod identity;
pub mod preview;
pub mod respond;
pub mod scoped;
pub mod submit;
