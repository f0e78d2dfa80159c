//! Decoding one UTF-8 character in place, for the loops that walk a `str`'s bytes themselves
//! (the record writer's escapes, the near-miss search's folding) and meet a non-ASCII one; and
//! cutting a text a caller chose to a number of code points before an answer quotes it.

/// `s` as an answer or a stored diagnostic quotes it: at most `max` code points, then `...`
/// when it was cut (borrowed when it was not).
pub fn cut_chars(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}...", &s[..at]).into(),
        None => s.into(),
    }
}

/// The code point at byte `i` of valid UTF-8 (the bytes of a `str`) whose lead byte is not
/// ASCII, and its width in bytes.
#[inline(always)]
pub fn decode_wide(bytes: &[u8], i: usize) -> (u32, usize) {
    let b = u32::from(bytes[i]);
    let cont = |j: usize| u32::from(bytes[i + j] & 0x3F);
    if b < 0xE0 {
        (((b & 0x1F) << 6) | cont(1), 2)
    } else if b < 0xF0 {
        (((b & 0x0F) << 12) | (cont(1) << 6) | cont(2), 3)
    } else {
        (
            ((b & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3),
            4,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every width, at the start and in the middle of a text, against `char`'s own decoding.
    #[test]
    fn decodes_what_chars_decodes() {
        let s = "a\u{80}\u{7ff}\u{800}é\u{ffff}\u{10000}🌍\u{10ffff}z";
        for (i, c) in s.char_indices().filter(|(_, c)| !c.is_ascii()) {
            assert_eq!(
                decode_wide(s.as_bytes(), i),
                (c as u32, c.len_utf8()),
                "{c:?}"
            );
        }
    }
}
