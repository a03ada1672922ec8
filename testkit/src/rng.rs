//! splitmix64.

/// splitmix64: a small deterministic generator, so that a failing run can be
/// repeated and a generated file holds the same events on every run.
pub struct Rng(pub u64);

impl Rng {
    /// The generator of stream `stream` of `seed` (the batch generator makes one
    /// per flight, so that any flight can be made on its own).
    pub fn stream(seed: u64, stream: u64) -> Rng {
        Rng(seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }

    /// The next number. (Named as the tests have always called it; an `Iterator`
    /// would hand out `Option`s of a sequence that never ends.)
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..bound`.
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    /// A number in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }

    pub fn index(&mut self, len: usize) -> usize {
        usize::try_from(self.next() % len as u64).expect("fits")
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn the_sequence_is_splitmix64() {
        // The first outputs of splitmix64 seeded with 0 (Vigna's reference code).
        let mut rng = Rng(0);
        assert_eq!(rng.next(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(rng.next(), 0x6e78_9e6a_a1b9_65f4);
        let mut stream = Rng::stream(7, 0);
        assert_eq!(stream.next(), Rng(7).next());
        assert!(Rng(1).between(3, 5) >= 3 && Rng(1).between(3, 5) <= 5);
    }
}
