//! Full-text search on a [`Table`]: the index's life cycle, BM25 search, and hybrid
//! (full-text + vector) search fused by reciprocal rank.

use std::collections::BTreeMap;

use basalt_storage::ReadView;

use crate::{Metric, Result, Table, TextHit, Tokenizer};

/// Settings of [`Table::hybrid_search`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hybrid {
    /// The constant of reciprocal rank fusion: a row ranked `r` (from 1) by a channel adds
    /// `weight / (rrf_k + r)` to its score. 60 is the usual choice.
    pub rrf_k: f32,
    /// How many of each channel's best rows enter the fusion (at least the `k` asked for).
    pub candidates: usize,
    /// Weight of the full-text channel.
    pub text_weight: f32,
    /// Weight of the vector channel.
    pub vector_weight: f32,
}

impl Default for Hybrid {
    fn default() -> Self {
        Hybrid { rrf_k: 60.0, candidates: 100, text_weight: 1.0, vector_weight: 1.0 }
    }
}

/// One row of a hybrid search, with what each channel said about it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HybridHit {
    /// The row's `_id`.
    pub id: u64,
    /// The fused score (higher is better).
    pub score: f32,
    /// Rank (from 1) and BM25 score in the full-text channel, if it found the row.
    pub text: Option<(usize, f32)>,
    /// Rank (from 1) and distance in the vector channel, if it found the row.
    pub vector: Option<(usize, f32)>,
}

impl Table {
    fn view(&self) -> Result<ReadView> {
        match &self.conn {
            Some(c) => Ok(c.lock().read_view()?),
            None => Ok(ReadView::Committed(self.db.inner.store.snapshot())),
        }
    }

    /// Creates the table's full-text index over text `columns` and indexes every row before
    /// returning (both cores; writers wait meanwhile). The index is then kept in step with
    /// every insert, update and delete, survives crashes (caught up from the log, or rebuilt)
    /// and is dropped with the table. One index per table.
    pub fn create_fts_index(&self, columns: &[&str], tokenizer: Tokenizer) -> Result<()> {
        Ok(self.db.inner.store.create_fts_index(&self.name, columns, tokenizer.name())?)
    }

    /// Drops the table's full-text index and its files.
    pub fn drop_fts_index(&self) -> Result<()> {
        Ok(self.db.inner.store.drop_fts_index(&self.name)?)
    }

    /// The full-text index's columns and tokenizer, if the table has one.
    pub fn fts_index(&self) -> Result<Option<(Vec<String>, Tokenizer)>> {
        let store = &self.db.inner.store;
        let Some((cols, tok)) = store.fts_definition(&store.snapshot(), &self.name)? else {
            return Ok(None);
        };
        let tok = tok
            .parse()
            .map_err(|source| basalt_storage::Error::Fts { table: self.name.clone(), source })?;
        Ok(Some((cols, tok)))
    }

    /// Full-text search: the rows matching `query` (tantivy syntax: words, `AND` / `OR` /
    /// `NOT`, `+word` / `-word`, `"phrases"`, `"phrase prefix"*`, `prefix*`, `word~1`
    /// fuzzy, `column:word`), best BM25 score first (ties by `_id`); `k` bounds the hits,
    /// `None` returns every match. Sees every committed write (read-your-writes); inside a
    /// transaction, its own deletes hide rows but its uncommitted inserts and updates are
    /// not searched. A malformed query is [`crate::StorageError::Fts`].
    pub fn search_text(&self, query: &str, k: Option<usize>) -> Result<Vec<TextHit>> {
        let store = &self.db.inner.store;
        Ok(store.search_text(&self.view()?, &self.name, None, query, k)?)
    }

    /// [`Table::search_text`] with unqualified words matched in one indexed column only.
    pub fn search_text_in(
        &self,
        column: &str,
        query: &str,
        k: Option<usize>,
    ) -> Result<Vec<TextHit>> {
        let store = &self.db.inner.store;
        Ok(store.search_text(&self.view()?, &self.name, Some(column), query, k)?)
    }

    /// Hybrid search: the best `candidates` rows of a full-text search for `text` and of a
    /// vector search for `vector` on `vector_column`, fused by weighted reciprocal rank
    /// ([`Hybrid`]); the best `k` fused rows, with each channel's rank and score. A row
    /// found by one channel only keeps its place.
    pub fn hybrid_search(
        &self,
        text: &str,
        vector_column: &str,
        vector: &[f32],
        metric: Metric,
        k: usize,
        options: Hybrid,
    ) -> Result<Vec<HybridHit>> {
        let n = options.candidates.max(k);
        let texts = self.search_text(text, Some(n))?;
        let near = self.topk(vector_column, vector, n, metric)?;
        let mut fused: BTreeMap<u64, HybridHit> = BTreeMap::new();
        fn hit(m: &mut BTreeMap<u64, HybridHit>, id: u64) -> &mut HybridHit {
            m.entry(id).or_insert(HybridHit { id, score: 0.0, text: None, vector: None })
        }
        for (i, h) in texts.iter().enumerate() {
            let e = hit(&mut fused, h.id);
            e.score += options.text_weight / (options.rrf_k + (i + 1) as f32);
            e.text = Some((i + 1, h.score));
        }
        for (i, nb) in near.iter().enumerate() {
            let e = hit(&mut fused, nb.id);
            e.score += options.vector_weight / (options.rrf_k + (i + 1) as f32);
            e.vector = Some((i + 1, nb.distance));
        }
        let mut out: Vec<HybridHit> = fused.into_values().collect();
        out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        out.truncate(k);
        Ok(out)
    }
}
