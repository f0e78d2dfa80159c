//! patchdiff-mcp: the stdio MCP front end of pg_patchdiff. Not built yet: it arrives with the
//! front-end issue. Until then, the SQL API is the way in (see docs/sql-api.md).

fn main() {
    eprintln!("patchdiff-mcp is not implemented yet; use the SQL API (docs/sql-api.md)");
    std::process::exit(2);
}
