//! The submission tools: the pipeline every submission shares (`submit`), advisory previews,
//! and scoped submissions against issued observations (`scoped`).

pub mod preview;
pub mod scoped;
pub mod submit;
