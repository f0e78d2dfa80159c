//! The target ID rule of a sharded deployment (issue 20; docs/scale-out.md).
//!
//! A router routes every call by its target's ID to one of `count` partitions (a power of two,
//! as PL/Proxy's `RUN ON` requires): the partition of an ID is its first 32 bits, read as a
//! big-endian integer (the first eight hex digits of the UUID), masked by `count - 1`. A shard
//! told to create a target for partition `p` (the settings `patchdiff.target_partition` and
//! `patchdiff.target_partitions`) makes a random version-4 UUID and sets those low bits to `p`,
//! so the new target routes back to the shard that holds it. Only bits inside the first 32 are
//! set: the version and variant bits stay, and at most 16 of the 122 random bits are fixed.

/// Largest partition count (16 bits of the UUID).
pub const MAX_PARTITIONS: u32 = 1 << 16;

/// Why a partition setting cannot be used.
#[derive(Debug, PartialEq, Eq)]
pub struct BadPartition(pub String);

/// Checks `partition` of `count`: `count` a power of two from 1 to [`MAX_PARTITIONS`], and
/// `0 <= partition < count`.
pub fn check(partition: i64, count: i64) -> Result<(u32, u32), BadPartition> {
    let ok_count = (1..=i64::from(MAX_PARTITIONS)).contains(&count) && count & (count - 1) == 0;
    if !ok_count {
        return Err(BadPartition(format!(
            "patchdiff.target_partitions must be a power of two from 1 to {MAX_PARTITIONS}, not {count}"
        )));
    }
    if !(0..count).contains(&partition) {
        return Err(BadPartition(format!(
            "patchdiff.target_partition must be from 0 to {} (patchdiff.target_partitions - 1), not {partition}",
            count - 1
        )));
    }
    Ok((partition as u32, count as u32))
}

/// `random` (16 bytes of a version-4 UUID) with its partition bits set to `partition` of
/// `count` (checked by [`check`]).
pub fn place(mut random: [u8; 16], partition: u32, count: u32) -> [u8; 16] {
    let mask = count - 1;
    let first = u32::from_be_bytes([random[0], random[1], random[2], random[3]]);
    let placed = (first & !mask) | (partition & mask);
    random[..4].copy_from_slice(&placed.to_be_bytes());
    random
}

/// The partition of a target ID under `count` partitions, by the rule above: `None` when the
/// ID does not begin with eight hex digits (such an ID names no target; any shard answers it).
pub fn of(id: &str, count: u32) -> Option<u32> {
    let head = id.get(..8)?;
    let first = u32::from_str_radix(head, 16).ok()?;
    head.bytes()
        .all(|b| b.is_ascii_hexdigit())
        .then_some(first & (count - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uuid(b: [u8; 16]) -> String {
        let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..]
        )
    }

    /// docs/scale-out.md "Target IDs": a placed ID routes back to its partition for every
    /// count, keeps the version-4 and variant bits and every bit outside the mask.
    #[test]
    fn placed_ids_route_back() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for count in [1u32, 2, 4, 64, 1024, MAX_PARTITIONS] {
            for _ in 0..500 {
                let mut r = [0u8; 16];
                for b in &mut r {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *b = x as u8;
                }
                r[6] = (r[6] & 0x0f) | 0x40;
                r[8] = (r[8] & 0x3f) | 0x80;
                let p = (x as u32) & (count - 1);
                let placed = place(r, p, count);
                assert_eq!(of(&uuid(placed), count), Some(p));
                assert_eq!((placed[6] >> 4, placed[8] >> 6), (4, 2));
                assert_eq!(placed[4..], r[4..]);
                let mask = (count - 1).to_be_bytes();
                for i in 0..4 {
                    assert_eq!(placed[i] & !mask[i], r[i] & !mask[i]);
                }
            }
        }
    }

    #[test]
    fn settings_are_checked() {
        assert_eq!(check(0, 1), Ok((0, 1)));
        assert_eq!(check(63, 64), Ok((63, 64)));
        assert!(check(64, 64).is_err());
        assert!(check(-1, 64).is_err());
        assert!(check(0, 48).is_err());
        assert!(check(0, 0).is_err());
        assert!(check(0, 1 << 17).is_err());
    }

    #[test]
    fn ids_without_a_hex_head_have_no_partition() {
        assert_eq!(of("not-a-uuid", 64), None);
        assert_eq!(of("+1234567-aaaa", 64), None);
        assert_eq!(of("abc", 64), None);
        assert_eq!(of("0000003F-0000-4000-8000-000000000000", 64), Some(63));
    }
}
