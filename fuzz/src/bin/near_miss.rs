//! AFL++ target `near_miss`: see [`patchdiff_fuzz::near_miss`].
fn main() {
    afl::fuzz!(|data: &[u8]| {
        patchdiff_fuzz::near_miss(data);
    });
}
