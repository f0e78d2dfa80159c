//! AFL++ target `submit`: see [`patchdiff_fuzz::submit`].
fn main() {
    afl::fuzz!(|data: &[u8]| {
        patchdiff_fuzz::submit(data);
    });
}
