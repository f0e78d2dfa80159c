//! Shared pieces of the benchmark commands in `src/bin/` (docs/benchmarks.md).

/// xorshift64: deterministic corpora and queries. The recorded figures of the near-miss and
/// drift benchmarks were taken over its sequence, so it stays exactly this generator.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}
