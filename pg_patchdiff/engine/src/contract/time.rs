//! Timestamps as the contract writes them.

/// RFC 3339 UTC with microseconds, PostgreSQL's own precision:
/// `2026-10-22T23:28:20.000000Z`. Always six fraction digits, so strings sort like instants.
pub fn rfc3339_utc(micros: i64) -> String {
    let mut out = String::with_capacity(27);
    write_rfc3339_utc(micros, &mut out);
    out
}

/// [`rfc3339_utc`] appended to `out`; years 0 to 9999 (every timestamp this extension writes)
/// without `core::fmt`, which history pages would otherwise call seven times per entry.
pub fn write_rfc3339_utc(micros: i64, out: &mut String) {
    let secs = micros.div_euclid(1_000_000);
    let frac = micros.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, mo, d) = civil_from_days(days);
    if !(0..=9999).contains(&y) {
        use std::fmt::Write;
        let _ = write!(
            out,
            "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{frac:06}Z",
            sod / 3600,
            sod % 3600 / 60,
            sod % 60
        );
        return;
    }
    let mut b = *b"0000-00-00T00:00:00.000000Z";
    let mut put = |at: usize, width: usize, mut n: i64| {
        for i in (at..at + width).rev() {
            b[i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
    };
    put(0, 4, y);
    put(5, 2, i64::from(mo));
    put(8, 2, i64::from(d));
    put(11, 2, sod / 3600);
    put(14, 2, sod % 3600 / 60);
    put(17, 2, sod % 60);
    put(20, 6, frac);
    // Only ASCII digits and punctuation.
    out.push_str(std::str::from_utf8(&b).unwrap_or_default());
}

/// Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(rfc3339_utc(-1), "1969-12-31T23:59:59.999999Z");
        assert_eq!(
            rfc3339_utc(951_782_400_000_001),
            "2000-02-29T00:00:00.000001Z"
        );
        assert_eq!(
            rfc3339_utc(4_107_542_399_000_000),
            "2100-02-28T23:59:59.000000Z"
        );
    }

    /// The formatting before issue 21, item 4, the oracle of [`write_rfc3339_utc`].
    fn with_fmt(micros: i64) -> String {
        let secs = micros.div_euclid(1_000_000);
        let frac = micros.rem_euclid(1_000_000);
        let days = secs.div_euclid(86_400);
        let sod = secs.rem_euclid(86_400);
        let (y, mo, d) = civil_from_days(days);
        format!(
            "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{frac:06}Z",
            sod / 3600,
            sod % 3600 / 60,
            sod % 60
        )
    }

    proptest::proptest! {
        /// The digits written by hand equal core::fmt's, for any i64 (PostgreSQL's whole
        /// timestamptz range included) and for the years 1970 to 9999 in particular.
        #[test]
        fn written_equals_formatted(
            micros in proptest::num::i64::ANY,
            recent in 0i64..253_402_300_800_000_000,
        ) {
            proptest::prop_assert_eq!(rfc3339_utc(micros), with_fmt(micros));
            proptest::prop_assert_eq!(rfc3339_utc(recent), with_fmt(recent));
        }
    }
}
