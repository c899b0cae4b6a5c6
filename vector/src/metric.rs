//! Distance metrics: names, the pairwise distance (simsimd with a portable fallback) and the
//! `f64` scalar reference. Owns the definition of each metric; must not hold any scan or
//! selection logic (that is [`crate::topk`]).

use simsimd::SpatialSimilarity;

use crate::{Error, Result};

/// A distance metric. Smaller is closer for every metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Squared Euclidean distance Σ (xᵢ − qᵢ)².
    L2Squared,
    /// Euclidean distance √Σ (xᵢ − qᵢ)².
    L2,
    /// Cosine distance 1 − x·q / (‖x‖·‖q‖); undefined (no distance) for a zero vector.
    Cosine,
    /// Negative inner product −Σ xᵢ·qᵢ (the inner product as a distance).
    Dot,
}

impl Metric {
    /// Every metric.
    pub const ALL: [Metric; 4] = [Metric::L2Squared, Metric::L2, Metric::Cosine, Metric::Dot];

    /// The canonical name (`l2sq`, `l2`, `cosine`, `dot`).
    pub fn name(self) -> &'static str {
        match self {
            Metric::L2Squared => "l2sq",
            Metric::L2 => "l2",
            Metric::Cosine => "cosine",
            Metric::Dot => "dot",
        }
    }
}

impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Metric {
    type Err = Error;

    /// Parses a metric name, case-insensitively: `l2` / `euclidean`, `l2sq` /
    /// `l2_squared` / `sqeuclidean`, `cosine` / `cos`, `dot` / `ip` / `inner_product` /
    /// `negative_inner_product`.
    fn from_str(s: &str) -> Result<Metric> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "l2" | "euclidean" => Metric::L2,
            "l2sq" | "l2_squared" | "sqeuclidean" => Metric::L2Squared,
            "cosine" | "cos" => Metric::Cosine,
            "dot" | "ip" | "inner_product" | "negative_inner_product" => Metric::Dot,
            _ => return Err(Error::UnknownMetric(s.to_string())),
        })
    }
}

/// The distance between two vectors by simsimd (AVX2 / AVX-512 / NEON / SVE chosen at run
/// time, portable C otherwise). `Ok(None)` under cosine when either vector is zero.
pub fn distance(metric: Metric, a: &[f32], b: &[f32]) -> Result<Option<f64>> {
    if a.len() != b.len() {
        return Err(Error::Dimension { query: 0, expected: a.len(), found: b.len() });
    }
    // simsimd answers `None` only for slices of different lengths, ruled out above.
    let d = match metric {
        Metric::L2Squared => <f32 as SpatialSimilarity>::l2sq(a, b),
        Metric::L2 => <f32 as SpatialSimilarity>::l2(a, b),
        Metric::Dot => <f32 as SpatialSimilarity>::dot(a, b).map(|d| -d),
        Metric::Cosine => {
            // simsimd calls a zero vector's cosine distance 1 (or 0 for two); Basalt, like
            // SQL's `cosine_distance`, has none.
            if a.iter().all(|x| *x == 0.0) || b.iter().all(|x| *x == 0.0) {
                return Ok(None);
            }
            <f32 as SpatialSimilarity>::cos(a, b)
        }
    };
    Ok(d)
}

/// The scalar reference: each metric computed term by term in `f64`. Slow; used by tests
/// and as the definition the kernels must agree with. `None` under cosine for a zero
/// vector or when the lengths differ.
pub fn reference_distance(metric: Metric, a: &[f32], b: &[f32]) -> Option<f64> {
    if a.len() != b.len() {
        return None;
    }
    let pairs = a.iter().zip(b).map(|(x, y)| (f64::from(*x), f64::from(*y)));
    match metric {
        Metric::L2Squared => Some(pairs.map(|(x, y)| (x - y) * (x - y)).sum()),
        Metric::L2 => Some(pairs.map(|(x, y)| (x - y) * (x - y)).sum::<f64>().sqrt()),
        Metric::Dot => Some(-pairs.map(|(x, y)| x * y).sum::<f64>()),
        Metric::Cosine => {
            let (mut xy, mut xx, mut yy) = (0.0, 0.0, 0.0);
            for (x, y) in pairs {
                xy += x * y;
                xx += x * x;
                yy += y * y;
            }
            (xx > 0.0 && yy > 0.0).then(|| 1.0 - xy / (xx.sqrt() * yy.sqrt()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Absolute tolerance for `f32` arithmetic over `dim` terms of magnitude ≤ `scale`.
    pub(crate) fn tolerance(dim: usize, scale: f64) -> f64 {
        1e-5 * (dim as f64) * scale * scale + 1e-5
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_errors() {
        for m in Metric::ALL {
            assert_eq!(m.name().parse::<Metric>(), Ok(m));
        }
        assert_eq!("COSINE".parse::<Metric>(), Ok(Metric::Cosine));
        assert_eq!("inner_product".parse::<Metric>(), Ok(Metric::Dot));
        assert!(matches!("hamming".parse::<Metric>(), Err(Error::UnknownMetric(_))));
    }

    #[test]
    fn zero_vectors_have_no_cosine_distance_and_lengths_must_match() {
        assert_eq!(distance(Metric::Cosine, &[0.0, 0.0], &[1.0, 0.0]), Ok(None));
        assert_eq!(reference_distance(Metric::Cosine, &[1.0, 2.0], &[0.0, 0.0]), None);
        assert!(matches!(
            distance(Metric::L2, &[1.0], &[1.0, 2.0]),
            Err(Error::Dimension { expected: 1, found: 2, .. })
        ));
        let d = distance(Metric::Dot, &[1.0, 2.0], &[3.0, 4.0]).unwrap();
        assert_eq!(d, Some(-11.0));
    }

    proptest! {
        #[test]
        fn simsimd_agrees_with_the_reference(
            dim in 1usize..70,
            seed in proptest::collection::vec(-4.0f32..4.0, 140),
        ) {
            let (a, b) = (&seed[..dim], &seed[70..70 + dim]);
            for m in Metric::ALL {
                let want = reference_distance(m, a, b);
                let got = distance(m, a, b).unwrap();
                match (want, got) {
                    (None, None) => {}
                    (Some(w), Some(g)) => {
                        // Cosine: simsimd normalises with a refined reciprocal square root.
                        let tol = if m == Metric::Cosine { 1e-4 } else { tolerance(dim, 4.0) };
                        prop_assert!((w - g).abs() <= tol, "{m}: {w} vs {g}");
                    }
                    (w, g) => prop_assert!(false, "{m}: {w:?} vs {g:?}"),
                }
            }
        }
    }
}
