//! AFL++ target `waymark`: see [`patchdiff_fuzz::waymark`].
fn main() {
    afl::fuzz!(|data: &[u8]| {
        patchdiff_fuzz::waymark(data);
    });
}
