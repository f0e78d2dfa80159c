//! AFL++ target `wire`: see [`patchdiff_fuzz::wire`].
fn main() {
    afl::fuzz!(|data: &[u8]| {
        patchdiff_fuzz::wire(data);
    });
}
