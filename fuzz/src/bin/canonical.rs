//! AFL++ target `canonical`: see [`patchdiff_fuzz::canonical`].
fn main() {
    afl::fuzz!(|data: &[u8]| {
        patchdiff_fuzz::canonical(data);
    });
}
