//! UUID text: the contract's identifiers are hyphenated UUID strings.

/// The lowercase hyphenated form of `s` if it is a hyphenated UUID (any case), else `None`.
pub fn canonical_uuid(s: &str) -> Option<String> {
    let b = s.as_bytes();
    if b.len() != 36 {
        return None;
    }
    for (i, &c) in b.iter().enumerate() {
        let ok = match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_hexdigit(),
        };
        if !ok {
            return None;
        }
    }
    Some(s.to_ascii_lowercase())
}

/// Whether `s` is 64 lowercase hex digits (a SHA-256 identity).
pub fn is_sha256_hex(s: &str) -> bool {
    is_lower_hex(s, 64)
}

/// Whether `s` is exactly `len` lowercase hex digits (`s ~ '^[0-9a-f]{len}$'`).
pub fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_forms() {
        assert_eq!(
            canonical_uuid("11111111-1111-4111-8111-11111111111A").as_deref(),
            Some("11111111-1111-4111-8111-11111111111a")
        );
        assert!(canonical_uuid("11111111111141118111111111111111").is_none());
        assert!(canonical_uuid("{11111111-1111-4111-8111-111111111111}").is_none());
        assert!(is_sha256_hex(&"a".repeat(64)));
        assert!(!is_sha256_hex(&"A".repeat(64)));
    }
}
