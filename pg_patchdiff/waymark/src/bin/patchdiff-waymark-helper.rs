//! The parser helper a pg_patchdiff backend starts (installed beside the extension's library):
//! it confines itself, then answers outline requests on stdin/stdout until stdin closes.
//! See `patchdiff_waymark::helper` for the wire and the limits.

use patchdiff_waymark::helper::{self, EXIT_USAGE, LimitedAlloc, Limits};

#[global_allocator]
static ALLOC: LimitedAlloc = LimitedAlloc;

fn main() {
    let limits = Limits::from_args(std::env::args().skip(1))
        .and_then(|mut l| helper::confine(&mut l).map(|()| l));
    let limits = limits.unwrap_or_else(|e| {
        eprintln!("patchdiff-waymark-helper: {e}");
        std::process::exit(EXIT_USAGE)
    });
    let (mut input, mut output) = (std::io::stdin().lock(), std::io::stdout().lock());
    if let Err(e) = helper::serve(&limits, &mut input, &mut output) {
        eprintln!("patchdiff-waymark-helper: {e}");
        std::process::exit(EXIT_USAGE);
    }
}
