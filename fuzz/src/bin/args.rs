//! AFL++ target `args`: see [`patchdiff_fuzz::args`].
fn main() {
    afl::fuzz!(|data: &[u8]| {
        patchdiff_fuzz::args(data);
    });
}
