//! AFL++ target `replay`: see [`patchdiff_fuzz::replay`].
fn main() {
    afl::fuzz!(|data: &[u8]| {
        patchdiff_fuzz::replay(data);
    });
}
