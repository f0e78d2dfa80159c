//! AFL++ target `diff`: see [`patchdiff_fuzz::diff`].
fn main() {
    afl::fuzz!(|data: &[u8]| {
        patchdiff_fuzz::diff(data);
    });
}
