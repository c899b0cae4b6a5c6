//! Embedders: the trait the memory store calls to turn text into vectors, and a
//! deterministic offline embedder for tests and demos.
//!
//! Owns no storage; an embedder is a pure function of its text (plus, for remote ones,
//! the network).

/// Turns texts into vectors of a fixed dimension for one named model.
pub trait Embedder: Send + Sync {
    /// The model name, checked against the store's.
    fn model(&self) -> &str;
    /// The vector dimension, checked against the store's.
    fn dim(&self) -> usize;
    /// One vector per text, in order.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String>;
}

/// A deterministic offline embedder: lower-cased word tokens and character trigrams of
/// each word hashed (FNV-1a) into `dim` buckets with a hashed sign, then normalised to
/// unit length. Texts sharing words land close under cosine distance; it knows no
/// synonyms. Model name `basalt-hash-v1`.
#[derive(Debug, Clone)]
pub struct HashEmbedder {
    dim: usize,
}

impl HashEmbedder {
    /// An embedder producing `dim`-dimensional vectors (`dim` ≥ 1).
    pub fn new(dim: usize) -> HashEmbedder {
        HashEmbedder { dim: dim.max(1) }
    }

    /// The vector of one text (all zeros for a text without letters or digits).
    pub fn vector(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; self.dim];
        let mut add = |feature: &[u8], weight: f32| {
            let h = fnv1a(feature);
            let bucket = (h % self.dim as u64) as usize;
            let sign = if (h >> 63) == 0 { 1.0 } else { -1.0 };
            v[bucket] += sign * weight;
        };
        for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
            let w = word.to_lowercase();
            add(w.as_bytes(), 1.0);
            let padded: Vec<char> = format!("^{w}$").chars().collect();
            for g in padded.windows(3) {
                let s: String = g.iter().collect();
                add(s.as_bytes(), 0.5);
            }
        }
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if n > 0.0 {
            v.iter_mut().for_each(|x| *x /= n);
        }
        v
    }
}

impl Embedder for HashEmbedder {
    fn model(&self) -> &str {
        "basalt-hash-v1"
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        Ok(texts.iter().map(|t| self.vector(t)).collect())
    }
}

/// 64-bit FNV-1a.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cos(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn deterministic_normalised_and_close_for_shared_words() {
        let e = HashEmbedder::new(256);
        let a = e.vector("The user prefers green tea in the morning");
        assert_eq!(a, e.vector("The user prefers green tea in the morning"));
        assert!((cos(&a, &a) - 1.0).abs() < 1e-5);
        let near = e.vector("user likes green tea");
        let far = e.vector("quarterly revenue forecast spreadsheet");
        assert!(cos(&a, &near) > cos(&a, &far) + 0.2, "{} vs {}", cos(&a, &near), cos(&a, &far));
        assert!(e.vector("  ... ").iter().all(|x| *x == 0.0));
        assert_eq!(e.embed(&["a", "b"]).map(|v| v.len()), Ok(2));
    }
}
