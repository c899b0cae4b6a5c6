//! Embedders: the trait the memory store calls to turn text into vectors, a
//! deterministic offline embedder for tests and demos, and the embedding cache.
//!
//! An embedder is a pure function of its text (plus, for remote ones, the network). The
//! only storage here is the optional persistent layer of [`CachedEmbedder`]: the table
//! `basalt_embedding_cache` of a database, written through the public API.

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

/// An embedding cache in front of another embedder: vectors are kept per (model, exact
/// text) — keyed by a 64-bit hash of both — so a text embedded once is not sent to the
/// provider again. Misses of one call go to the provider in one call. In memory, bounded
/// (the oldest entries go first); shared by every store using this embedder. With
/// [`CachedEmbedder::persistent`], vectors are also kept in a table of a database (not
/// bounded; the text is stored and compared, so a hash collision is a miss, never a wrong
/// vector) and survive restarts.
pub struct CachedEmbedder {
    inner: std::sync::Arc<dyn Embedder>,
    capacity: usize,
    state: std::sync::Mutex<CacheState>,
    disk: Option<crate::Database>,
}

/// The table of the persistent embedding cache.
pub const EMBEDDING_CACHE_TABLE: &str = "basalt_embedding_cache";

#[derive(Default)]
struct CacheState {
    map: std::collections::HashMap<u64, Vec<f32>>,
    order: std::collections::VecDeque<u64>,
    stats: CacheStats,
}

impl CacheState {
    /// Keeps `v` under `k`, evicting the oldest entries beyond `capacity`.
    fn put(&mut self, k: u64, v: Vec<f32>, capacity: usize) {
        if self.map.insert(k, v).is_none() {
            self.order.push_back(k);
        }
        while self.map.len() > capacity {
            match self.order.pop_front() {
                Some(old) => {
                    self.map.remove(&old);
                }
                None => break,
            }
        }
    }
}

/// What a [`CachedEmbedder`] has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Texts asked for.
    pub requested: u64,
    /// Texts answered from the cache.
    pub hits: u64,
    /// Calls made to the provider.
    pub provider_calls: u64,
    /// Texts sent to the provider.
    pub provider_texts: u64,
    /// Texts answered from the persistent table (counted in `hits` too).
    pub disk_hits: u64,
}

impl std::fmt::Debug for CachedEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedEmbedder")
            .field("model", &self.inner.model())
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl CachedEmbedder {
    /// A cache of at most `capacity` vectors in front of `inner`.
    pub fn new(inner: std::sync::Arc<dyn Embedder>, capacity: usize) -> CachedEmbedder {
        CachedEmbedder { inner, capacity: capacity.max(1), state: Default::default(), disk: None }
    }

    /// [`CachedEmbedder::new`] whose vectors are also kept in `db`'s table
    /// `basalt_embedding_cache` (created on first use): memory misses look there before
    /// calling the provider, and the provider's answers are written there (committed with
    /// the database's default durability).
    pub fn persistent(
        inner: std::sync::Arc<dyn Embedder>,
        capacity: usize,
        db: &crate::Database,
    ) -> crate::Result<CachedEmbedder> {
        use arrow_schema::{DataType, Field, Schema};
        if !db.list_tables().iter().any(|t| t == EMBEDDING_CACHE_TABLE) {
            db.create_table(
                EMBEDDING_CACHE_TABLE,
                &Schema::new(vec![
                    Field::new("model", DataType::Utf8, false),
                    Field::new("key", DataType::UInt64, false),
                    Field::new("text", DataType::Utf8, false),
                    Field::new("vector", DataType::Binary, false),
                ]),
            )?;
        }
        let mut c = CachedEmbedder::new(inner, capacity);
        c.disk = Some(db.clone());
        Ok(c)
    }

    /// Vectors of `wanted` (key, text) pairs found in the persistent table.
    fn disk_get(
        &self,
        db: &crate::Database,
        wanted: &[(u64, &str)],
    ) -> crate::Result<std::collections::HashMap<u64, Vec<f32>>> {
        use crate::{Predicate, Row, Value};
        let mut found = std::collections::HashMap::new();
        let pred = Predicate::And(vec![
            Predicate::eq("model", self.inner.model()),
            Predicate::InList {
                column: "key".into(),
                values: wanted.iter().map(|(k, _)| (*k).into()).collect(),
                negated: false,
            },
        ]);
        let table = db.table(EMBEDDING_CACHE_TABLE)?;
        for b in table.scan_where(&["key", "text", "vector"], &pred)? {
            let b = b?;
            for i in 0..b.num_rows() {
                let r = Row::from_batch(&b, i);
                let (Some(Value::UInt(k)), Some(Value::Str(t)), Some(Value::Bytes(v))) =
                    (r.get("key"), r.get("text"), r.get("vector"))
                else {
                    continue;
                };
                let same_text = wanted.iter().any(|(wk, wt)| wk == k && wt == t);
                if same_text && v.len() == 4 * self.inner.dim() {
                    let vec =
                        v.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
                    found.insert(*k, vec.collect());
                }
            }
        }
        Ok(found)
    }

    /// Writes fresh vectors to the persistent table (one insert).
    fn disk_put(&self, db: &crate::Database, fresh: &[(u64, &str, &[f32])]) -> crate::Result<()> {
        let rows: Vec<crate::Row> = fresh
            .iter()
            .map(|(k, t, v)| {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                crate::Row::new()
                    .set("model", self.inner.model())
                    .set("key", *k)
                    .set("text", *t)
                    .set("vector", bytes)
            })
            .collect();
        db.table(EMBEDDING_CACHE_TABLE)?.insert_rows(&rows)?;
        Ok(())
    }

    /// Counters since creation.
    pub fn stats(&self) -> CacheStats {
        self.state.lock().map(|s| s.stats).unwrap_or_default()
    }

    fn key(&self, text: &str) -> u64 {
        let mut k = Vec::with_capacity(self.inner.model().len() + 1 + text.len());
        k.extend_from_slice(self.inner.model().as_bytes());
        k.push(0);
        k.extend_from_slice(text.as_bytes());
        fnv1a(&k)
    }
}

impl Embedder for CachedEmbedder {
    fn model(&self) -> &str {
        self.inner.model()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        let keys: Vec<u64> = texts.iter().map(|t| self.key(t)).collect();
        let mut out: Vec<Option<Vec<f32>>> = Vec::with_capacity(texts.len());
        let mut missing: Vec<usize> = Vec::new();
        {
            let mut st = self.state.lock().map_err(|_| "embedding cache poisoned".to_string())?;
            st.stats.requested += texts.len() as u64;
            for (i, k) in keys.iter().enumerate() {
                let hit = st.map.get(k).cloned();
                if hit.is_none() {
                    missing.push(i);
                }
                out.push(hit);
            }
            st.stats.hits += (texts.len() - missing.len()) as u64;
        }
        if !missing.is_empty()
            && let Some(db) = &self.disk
        {
            let wanted: Vec<(u64, &str)> = missing.iter().map(|&i| (keys[i], texts[i])).collect();
            let found = self.disk_get(db, &wanted).map_err(|e| format!("embedding cache: {e}"))?;
            if !found.is_empty() {
                let mut st =
                    self.state.lock().map_err(|_| "embedding cache poisoned".to_string())?;
                let before = missing.len();
                missing.retain(|&i| match found.get(&keys[i]) {
                    Some(v) => {
                        out[i] = Some(v.clone());
                        false
                    }
                    None => true,
                });
                let n = (before - missing.len()) as u64;
                st.stats.hits += n;
                st.stats.disk_hits += n;
                for (k, v) in found {
                    st.put(k, v, self.capacity);
                }
            }
        }
        if !missing.is_empty() {
            // One provider call for the distinct missing texts.
            let mut distinct: Vec<usize> = Vec::new();
            for &i in &missing {
                if !distinct.iter().any(|&j| keys[j] == keys[i]) {
                    distinct.push(i);
                }
            }
            let asked: Vec<&str> = distinct.iter().map(|&i| texts[i]).collect();
            let got = self.inner.embed(&asked)?;
            if got.len() != asked.len() {
                return Err(format!(
                    "the provider returned {} vectors for {} texts",
                    got.len(),
                    asked.len()
                ));
            }
            if let Some(db) = &self.disk {
                let rows: Vec<(u64, &str, &[f32])> = distinct
                    .iter()
                    .zip(&got)
                    .map(|(&i, v)| (keys[i], texts[i], v.as_slice()))
                    .collect();
                self.disk_put(db, &rows).map_err(|e| format!("embedding cache: {e}"))?;
            }
            let fresh: std::collections::HashMap<u64, Vec<f32>> =
                distinct.iter().map(|&i| keys[i]).zip(got).collect();
            let mut st = self.state.lock().map_err(|_| "embedding cache poisoned".to_string())?;
            st.stats.provider_calls += 1;
            st.stats.provider_texts += asked.len() as u64;
            for (k, v) in &fresh {
                st.put(*k, v.clone(), self.capacity);
            }
            for &i in &missing {
                out[i] = fresh.get(&keys[i]).cloned();
            }
        }
        out.into_iter()
            .map(|v| v.ok_or_else(|| "the provider returned no vector".to_string()))
            .collect()
    }
}

/// 64-bit FNV-1a.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = Fnv1a::new();
    h.bytes(bytes);
    h.finish()
}

/// 64-bit FNV-1a fed piece by piece.
pub(crate) struct Fnv1a(u64);

impl Fnv1a {
    pub(crate) fn new() -> Fnv1a {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }

    pub(crate) fn byte(&mut self, b: u8) {
        self.0 ^= u64::from(b);
        self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
    }

    pub(crate) fn bytes(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.byte(*b);
        }
    }

    pub(crate) fn finish(&self) -> u64 {
        self.0
    }
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

    #[test]
    fn the_cache_answers_repeats_without_the_provider() {
        let inner = std::sync::Arc::new(HashEmbedder::new(32));
        let c = CachedEmbedder::new(inner.clone(), 100);
        let texts: Vec<String> = (0..10).map(|i| format!("text number {i}")).collect();
        for _ in 0..10 {
            for t in &texts {
                assert_eq!(c.embed(&[t.as_str()]), Ok(vec![inner.vector(t)]));
            }
        }
        let s = c.stats();
        assert_eq!((s.requested, s.hits, s.provider_texts), (100, 90, 10));
        // Repeats inside one call go to the provider once; a tiny cache still answers.
        let small = CachedEmbedder::new(inner.clone(), 1);
        let got = small.embed(&["a", "b", "a"]).unwrap_or_default();
        assert_eq!(got, vec![inner.vector("a"), inner.vector("b"), inner.vector("a")]);
        assert_eq!((small.stats().provider_calls, small.stats().provider_texts), (1, 2));
        assert_eq!((c.model(), c.dim()), ("basalt-hash-v1", 32));
    }
}
