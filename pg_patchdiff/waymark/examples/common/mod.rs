//! What the benchmark examples of this crate share (`mod common;`; not an example itself).

/// The count in environment variable `variable`, or `default` when it is not set. A median needs
/// a run, so anything but a whole number of at least 1 is refused (exit 2) rather than taken as
/// the default or left to panic.
pub fn count_from_env(variable: &str, default: usize) -> usize {
    let Ok(value) = std::env::var(variable) else {
        return default;
    };
    value.parse().ok().filter(|&n| n >= 1).unwrap_or_else(|| {
        eprintln!("{variable} must be a whole number of at least 1, not {value:?}");
        std::process::exit(2)
    })
}
