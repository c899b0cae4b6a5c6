//! Terms of a column: hashing, interning distinct texts and terms, cutting texts into
//! tokens a batch at a time, and the occurrences each segment writes.
//!
//! Part of the bulk build (see the module doc of `bulk`).

use super::*;

/// A 64-bit hash of a byte string (multiply-rotate over 8-byte words, then a finalizer).
pub(super) fn hash_bytes(seed: u64, b: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = seed ^ (b.len() as u64).wrapping_mul(K);
    let mut words = b.chunks_exact(8);
    for w in &mut words {
        let v = w.try_into().map_or(0, u64::from_le_bytes);
        h = (h ^ v).wrapping_mul(K).rotate_left(29);
    }
    let mut tail = [0u8; 8];
    tail[..words.remainder().len()].copy_from_slice(words.remainder());
    h = (h ^ u64::from_le_bytes(tail)).wrapping_mul(K);
    h ^= h >> 32;
    h = h.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    h ^ (h >> 29)
}

/// A [`Hasher`] over [`hash_bytes`] (the texts cache) that passes a `u64` key through
/// unchanged (the interner's keys are already hashes).
#[derive(Default)]
pub(super) struct FastHasher(u64);

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0 = hash_bytes(self.0, bytes);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

pub(super) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// Interned terms of one field: ids in order of first appearance.
///
/// An open-addressing table of `u64` slots (the hash's high 32 bits beside the id + 1;
/// 0 is empty), at most half full: a new term costs one cache line of the table, which
/// matters for columns with a million distinct words.
#[derive(Default)]
pub(super) struct Interner {
    pub(super) bytes: Vec<u8>,
    /// `(start, len)` into `bytes` per term id.
    pub(super) spans: Vec<(u32, u32)>,
    pub(super) slots: Vec<u64>,
}

impl Interner {
    pub(super) fn len(&self) -> usize {
        self.spans.len()
    }

    /// Makes room for `more` new terms without growing the table.
    pub(super) fn reserve(&mut self, more: usize) {
        self.spans.reserve(more);
        let want = ((self.len() + more) * 2).next_power_of_two();
        if want > self.slots.len() {
            self.rebuild(want);
        }
    }

    pub(super) fn rebuild(&mut self, size: usize) {
        self.slots = vec![0; size];
        let mask = size - 1;
        for id in 0..self.spans.len() {
            let h = hash_bytes(0, self.get(id as u32));
            let mut i = h as usize & mask;
            while self.slots[i] != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = (h >> 32 << 32) | (id as u64 + 1);
        }
    }

    pub(super) fn get(&self, id: u32) -> &[u8] {
        let (s, l) = self.spans[id as usize];
        &self.bytes[s as usize..s as usize + l as usize]
    }

    /// Loads the table slots of these hashes (independent loads the CPU overlaps), so the
    /// interning that follows finds them in cache.
    pub(super) fn touch(&self, hashes: impl Iterator<Item = u64>) {
        if self.slots.is_empty() {
            return;
        }
        let mask = self.slots.len() - 1;
        let acc = hashes.fold(0u64, |acc, h| acc ^ self.slots[h as usize & mask]);
        std::hint::black_box(acc);
    }

    /// The id of term `b` (whose [`hash_bytes`] is `h`), new or not.
    pub(super) fn intern(&mut self, b: &[u8], h: u64) -> u32 {
        if (self.len() + 1) * 2 > self.slots.len() {
            self.rebuild((self.slots.len() * 2).max(1024));
        }
        let mask = self.slots.len() - 1;
        let mut i = h as usize & mask;
        loop {
            let slot = self.slots[i];
            if slot == 0 {
                break;
            }
            if slot >> 32 == h >> 32 {
                let id = (slot as u32).wrapping_sub(1);
                if self.get(id) == b {
                    return id;
                }
            }
            i = (i + 1) & mask;
        }
        let id = self.spans.len() as u32;
        self.slots[i] = (h >> 32 << 32) | (u64::from(id) + 1);
        self.spans.push((self.bytes.len() as u32, b.len() as u32));
        self.bytes.extend_from_slice(b);
        id
    }
}

/// A tokenized column: its terms, every occurrence `[term, doc, position]` in document
/// order, each document's field norm id, and the token count.
pub(super) struct Occurrences {
    pub(super) terms: Interner,
    pub(super) occ: Vec<[u32; 3]>,
    pub(super) norms: Vec<u8>,
    pub(super) tokens: u64,
}

/// Cuts texts into terms exactly as the index's analyzer does.
#[derive(Clone)]
pub(super) struct Cutter {
    pub(super) analyzer: TextAnalyzer,
    /// Texts a column's cache is tried on before it is dropped (unless half of them hit).
    pub(super) probe: u32,
    /// Whether ASCII texts may take the inlined path (the default tokenizer: runs of ASCII
    /// letters and digits, lowercased, dropped at [`crate::MAX_TOKEN_BYTES`] bytes or more —
    /// what `SimpleTokenizer`, `RemoveLongFilter` and `LowerCaser` do to ASCII text).
    pub(super) ascii_fast: bool,
}

impl Cutter {
    pub(super) fn new(analyzer: &TextAnalyzer, tokenizer: Tokenizer, probe: u32) -> Cutter {
        let ascii_fast = tokenizer == Tokenizer::Default;
        Cutter { analyzer: analyzer.clone(), ascii_fast, probe }
    }

    /// Calls `emit(term, position)` for each term of `text`, as tantivy's writer indexes
    /// them (tokens over [`MAX_TOKEN_LEN`] bytes are dropped).
    pub(super) fn cut(&mut self, text: &str, emit: &mut impl FnMut(&[u8], u32)) {
        if self.ascii_fast && text.is_ascii() {
            let b = text.as_bytes();
            let mut lower = [0u8; crate::MAX_TOKEN_BYTES];
            let (mut i, mut pos) = (0, 0u32);
            while i < b.len() {
                if !b[i].is_ascii_alphanumeric() {
                    i += 1;
                    continue;
                }
                let start = i;
                while i < b.len() && b[i].is_ascii_alphanumeric() {
                    i += 1;
                }
                let len = i - start;
                if len < crate::MAX_TOKEN_BYTES {
                    for (l, c) in lower.iter_mut().zip(&b[start..i]) {
                        *l = c.to_ascii_lowercase();
                    }
                    emit(&lower[..len], pos);
                }
                pos += 1;
            }
            return;
        }
        let mut stream = self.analyzer.token_stream(text);
        stream.process(&mut |tok: &Token| {
            if tok.text.len() <= MAX_TOKEN_LEN {
                emit(tok.text.as_bytes(), tok.position as u32);
            }
        });
    }
}

/// Documents cut ahead of interning when texts are mostly distinct: their terms' table
/// slots are loaded together first, so the cache misses overlap instead of queueing.
pub(super) const BATCH: usize = 32;

/// Field norm ids (tantivy's one-byte code of a token count) of small counts, looked up
/// instead of searched for each document.
pub(super) struct NormIds([u8; 256]);

impl NormIds {
    pub(super) fn new() -> NormIds {
        NormIds(std::array::from_fn(|n| FieldNormReader::fieldnorm_to_id(n as u32)))
    }

    pub(super) fn id(&self, tokens: usize) -> u8 {
        match self.0.get(tokens) {
            Some(&id) => id,
            None => FieldNormReader::fieldnorm_to_id(u32::try_from(tokens).unwrap_or(u32::MAX)),
        }
    }
}

/// Tokenizes the texts of `col` at `spans` (document `d` is `spans[d]`).
pub(super) fn tokenize(col: &Column, spans: &[(u32, u32)], cutter: &mut Cutter) -> Occurrences {
    let n = spans.len();
    let text_bytes: usize = spans.iter().map(|s| s.1 as usize).sum();
    let mut terms = Interner::default();
    let norm_ids = NormIds::new();
    // Room for the most tokens word tokenizers can cut (one per two bytes); untouched
    // capacity costs address space only.
    let mut occ: Vec<[u32; 3]> = Vec::with_capacity(((text_bytes + n) / 2).min(1 << 26));
    let mut norms = Vec::with_capacity(n);
    let mut tokens = 0u64;
    // Texts seen before → their range in `cached`.
    let mut cache: FastMap<&str, (u32, u32)> = FastMap::default();
    let mut cached: Vec<(u32, u32)> = Vec::new();
    let (mut lookups, mut hits) = (0u32, 0u32);
    let mut scratch: Vec<(u32, u32)> = Vec::new();
    let mut doc = 0;
    // Texts repeat (or we do not know yet): one document at a time, through the cache.
    while doc < n {
        let d = doc as u32;
        doc += 1;
        let Some(text) = col.text(spans[d as usize]) else {
            norms.push(0);
            continue;
        };
        lookups += 1;
        let toks: &[(u32, u32)] = if let Some(&(s, e)) = cache.get(text) {
            hits += 1;
            &cached[s as usize..e as usize]
        } else {
            scratch.clear();
            cutter.cut(text, &mut |b, p| scratch.push((terms.intern(b, hash_bytes(0, b)), p)));
            if cache.len() < CACHE_TEXTS {
                let s = cached.len() as u32;
                cached.extend_from_slice(&scratch);
                cache.insert(text, (s, cached.len() as u32));
            }
            &scratch
        };
        occ.extend(toks.iter().map(|&(t, p)| [t, d, p]));
        norms.push(norm_ids.id(toks.len()));
        tokens += toks.len() as u64;
        if lookups == cutter.probe && hits < lookups / 2 {
            break;
        }
    }
    if doc < n {
        // Mostly distinct texts: no cache, and room for about one new term per text
        // (growing a large table rehashes every term it holds).
        drop(cache);
        terms.reserve(n - doc);
    }
    // (hash, start, len, position) of the batch's terms, their bytes, and each document's
    // term count (`None`: NULL).
    let mut pending: Vec<(u64, u32, u32, u32)> = Vec::new();
    let mut bytes: Vec<u8> = Vec::new();
    let mut counts: Vec<Option<u32>> = Vec::with_capacity(BATCH);
    while doc < n {
        let batch = doc..(doc + BATCH).min(n);
        doc = batch.end;
        pending.clear();
        bytes.clear();
        counts.clear();
        for d in batch.clone() {
            let Some(text) = col.text(spans[d]) else {
                counts.push(None);
                continue;
            };
            let before = pending.len();
            cutter.cut(text, &mut |b, p| {
                pending.push((hash_bytes(0, b), bytes.len() as u32, b.len() as u32, p));
                bytes.extend_from_slice(b);
            });
            counts.push(Some((pending.len() - before) as u32));
        }
        terms.touch(pending.iter().map(|t| t.0));
        let mut next = pending.iter();
        for (d, count) in batch.zip(&counts) {
            let Some(count) = *count else {
                norms.push(0);
                continue;
            };
            for &(h, s, l, p) in next.by_ref().take(count as usize) {
                let t = terms.intern(&bytes[s as usize..(s + l) as usize], h);
                occ.push([t, d as u32, p]);
            }
            norms.push(norm_ids.id(count as usize));
            tokens += u64::from(count);
        }
    }
    Occurrences { terms, occ, norms, tokens }
}
