//! Order statistics over repetitions.

/// The median: the middle value, or the mean of the two middle values. `NaN` for no samples.
pub fn median(samples: &[f64]) -> f64 {
    let sorted = sorted(samples);
    let n = sorted.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The `p`-th percentile (0 < p ≤ 100) by the nearest-rank method: the smallest sample with at
/// least `p`% of the samples at or below it. It is always one of the samples; with fewer than
/// 100 samples, `percentile(_, 99.0)` is the maximum. `NaN` for no samples.
pub fn percentile(samples: &[f64], p: f64) -> f64 {
    let sorted = sorted(samples);
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn sorted(samples: &[f64]) -> Vec<f64> {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
}

/// Interleaved repetitions in a rotating order: for each of `reps` repetitions, every index of
/// `0..n` once, starting one further each time (`0 1 2`, `1 2 0`, `2 0 1`, …), so no side always
/// runs first. The order `init` and `container` stop their inits in.
pub fn rotations(n: usize, reps: usize) -> impl Iterator<Item = usize> {
    (0..reps).flat_map(move |rep| (0..n).map(move |k| (k + rep) % n))
}

/// Medians of `sides`: each runs `warm_up` times uncounted, then `reps` times, the sides in a
/// fresh random order in each repetition ([`Shuffle`] from `seed`). The first error ends it.
pub fn shuffled_medians<const N: usize>(
    sides: [&dyn Fn() -> crate::Result<f64>; N],
    warm_up: usize,
    reps: usize,
    seed: u64,
) -> crate::Result<[f64; N]> {
    for _ in 0..warm_up {
        for side in &sides {
            side()?;
        }
    }
    let mut samples: [Vec<f64>; N] = std::array::from_fn(|_| Vec::with_capacity(reps));
    let mut shuffle = Shuffle::new(seed);
    for _ in 0..reps {
        for i in shuffle.order(N) {
            samples[i].push(sides[i]()?);
        }
    }
    Ok(samples.map(|s| median(&s)))
}

/// Orders for interleaved sides: a fresh random permutation per repetition, so no side always
/// runs right after the same other side (what one leaves behind — write-protected pages after a
/// `fork`, a child still being torn down, cold caches — falls on each as often). Deterministic
/// (splitmix64 from a fixed seed), so a run can be repeated.
pub struct Shuffle(u64);

impl Shuffle {
    pub fn new(seed: u64) -> Shuffle {
        Shuffle(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A permutation of `0..n` (Fisher–Yates).
    pub fn order(&mut self, n: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            order.swap(i, j);
        }
        order
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotations_start_one_further_each_repetition() {
        let order: Vec<usize> = rotations(3, 4).collect();
        assert_eq!(order, [0, 1, 2, 1, 2, 0, 2, 0, 1, 0, 1, 2]);
        assert_eq!(rotations(0, 5).count(), 0);
    }

    #[test]
    fn shuffle_gives_permutations_and_every_neighbour() {
        let mut shuffle = Shuffle::new(1);
        let mut follows = [[0u32; 4]; 4];
        for _ in 0..4000 {
            let order = shuffle.order(4);
            let mut seen = order.clone();
            seen.sort_unstable();
            assert_eq!(seen, vec![0, 1, 2, 3]);
            for pair in order.windows(2) {
                follows[pair[0]][pair[1]] += 1;
            }
        }
        // Each ordered pair of distinct sides is adjacent about 4000 * 3 / 12 = 1000 times.
        for (a, row) in follows.iter().enumerate() {
            for (b, &n) in row.iter().enumerate() {
                if a != b {
                    assert!((800..1200).contains(&n), "{a} then {b}: {n} times");
                }
            }
        }
    }

    #[test]
    fn median_odd_even_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn nearest_rank() {
        let xs: Vec<f64> = (1..=50).map(f64::from).collect();
        assert_eq!(percentile(&xs, 50.0), 25.0);
        assert_eq!(percentile(&xs, 99.0), 50.0);
        let xs: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(percentile(&xs, 99.0), 198.0);
        assert_eq!(percentile(&[7.0], 1.0), 7.0);
        assert!(percentile(&[], 50.0).is_nan());
    }

    #[test]
    fn shuffled_medians_counts_no_warm_up_and_keeps_each_side_apart() {
        use std::cell::Cell;
        let (a_runs, b_runs) = (Cell::new(0u32), Cell::new(0u32));
        // Side a returns its run number (1, 2, ...): the warm-up runs (2) are not counted, so
        // the 5 counted samples are 3..=7, median 5. Side b always returns 100.
        let a = || {
            a_runs.set(a_runs.get() + 1);
            Ok(f64::from(a_runs.get()))
        };
        let b = || {
            b_runs.set(b_runs.get() + 1);
            Ok(100.0)
        };
        let [ma, mb] = shuffled_medians([&a, &b], 2, 5, 7).unwrap();
        assert_eq!((ma, mb), (5.0, 100.0));
        assert_eq!((a_runs.get(), b_runs.get()), (7, 7));
        let failing = || Err("side failed".into());
        let err = shuffled_medians([&a, &failing], 0, 3, 7).unwrap_err();
        assert_eq!(err.to_string(), "side failed");
    }
}
