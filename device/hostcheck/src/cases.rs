//! Random inputs for layout parity checks, shared by the host parity test and the GPU parity run
//! (`alignmalloc layout-parity`), so both exercise the same kinds of cases; the generator also
//! draws the protocol tests' steps.

use translator::{GeometryConfig, Handle};

/// A small deterministic generator (splitmix64): the same seed gives the same cases everywhere.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`; the modulo bias is irrelevant here).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `low..=high` (`low <= high < u64::MAX`).
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high - low + 1)
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A handle: half arbitrary 64-bit values (garbage included), half well-formed plain or
    /// arranged handles.
    pub fn handle(&mut self) -> u64 {
        if self.below(2) == 0 {
            return self.next_u64();
        }
        let address = self.below(1 << 48);
        let lane = self.below(32) as u32;
        match self.below(2) {
            0 => Handle::plain(address, lane).expect("in range").0,
            _ => {
                Handle::arranged(address, 12 + self.below(5) as u32, lane)
                    .expect("in range")
                    .0
            }
        }
    }

    /// A byte offset: any 64-bit value, or one below 4 GiB, or one below 1 MiB.
    pub fn offset(&mut self) -> u64 {
        match self.below(3) {
            0 => self.next_u64(),
            1 => self.below(1 << 32),
            _ => self.below(1 << 20),
        }
    }

    /// The default configuration half the time, else random valid thresholds.
    pub fn config(&mut self) -> GeometryConfig {
        if self.below(2) == 0 {
            return GeometryConfig::default();
        }
        let small = 16 * (1 + self.below(128));
        let portion = 4096 << self.below(4);
        let limit = portion + self.below(1 << 32);
        GeometryConfig::new(small, portion, limit).expect("valid by construction")
    }

    /// Lane sizes of one random class, some lanes inactive; now and then one lane over the limit.
    pub fn sizes(&mut self, config: &GeometryConfig) -> [u64; 32] {
        let top = match self.below(4) {
            0 => config.small_max(),
            1 => config.portion_max(),
            2 => 8 << 20,
            _ => 1 << self.below(34),
        };
        let mut sizes = [0u64; 32];
        for s in &mut sizes {
            if self.below(5) != 0 {
                *s = 1 + self.below(top);
            }
        }
        if self.below(200) == 0 {
            sizes[self.below(32) as usize] = config.max_lane_bytes() + 1 + self.below(1 << 20);
        }
        sizes
    }
}
