//! patchdiff-mcp: the stdio MCP front end of pg_patchdiff.
//!
//! It speaks newline-delimited JSON-RPC 2.0, checks argument names against each tool's schema,
//! filters tools by profile, makes exactly one SQL function call per tool call and shapes the
//! answer. It holds no edit logic: every verdict comes from the extension.

pub mod binding;
pub mod catalog;
pub mod compact;
pub mod config;
pub mod database;
pub mod embedded;
pub mod feed;
pub mod files;
pub mod http;
pub mod modern;
pub mod observed_v2;
pub mod rpc;
pub mod server;
pub mod tool;
pub mod workspace;
