//! Recall: vector, keyword or hybrid ranking of a namespace's live items, filters applied
//! before the top-k.
//!
//! Part of the memory store (see the module doc of `memory`).

use super::*;

impl MemoryStore {
    /// The best `k` live items for the request. Namespace, archive and expiry conditions
    /// run inside the scans (and the vector search) as storage predicates, the metadata
    /// filter picks candidate ids before any ranking, so `k` items that pass are returned
    /// whenever `k` exist; whole items are read only for the results.
    pub fn recall(&self, req: &Recall) -> Res<Vec<RecallHit>> {
        self.check_read(&req.namespace, req.filter.as_ref())?;
        if req.k == 0 {
            return Ok(Vec::new());
        }
        let t = self.db.table(&self.name)?;
        let pred = visible(&req.namespace, now_ms());
        // With a metadata filter, the candidates are an explicit id set.
        let filtered = match &req.filter {
            Some(f) => Some(self.candidate_ids(&t, &pred, Some(f))?),
            None => None,
        };
        let want_vec = !matches!(req.mode, RecallMode::Keyword);
        let want_kw = !matches!(req.mode, RecallMode::Vector);
        // Hybrid looks deeper in each channel than k, so fusion has material.
        let depth =
            if matches!(req.mode, RecallMode::Hybrid { .. }) { req.k.max(50) } else { req.k };
        let mut vec_hits: Vec<(u64, f32)> = Vec::new();
        if want_vec {
            let q = match &req.vector {
                Some(v) => {
                    self.check_vector(v)?;
                    Some(v.clone())
                }
                None if !req.query.trim().is_empty() => self.embed_one(&req.query)?,
                None => None,
            };
            if let Some(q) = q.filter(|q| q.iter().any(|x| *x != 0.0)) {
                let p = match &filtered {
                    Some(ids) => Predicate::id_set(ids.clone()),
                    None => pred.clone(),
                };
                let near = t
                    .batch_topk_with(
                        "embedding",
                        &[&q],
                        depth,
                        Metric::Cosine,
                        Some(&p),
                        req.precision,
                    )?
                    .pop()
                    .unwrap_or_default();
                for n in near {
                    let sim = 1.0 - n.distance;
                    if req.min_similarity.is_none_or(|m| sim >= m) {
                        vec_hits.push((n.id, sim));
                    }
                }
            } else if matches!(req.mode, RecallMode::Vector) {
                return Err(self.invalid(
                    "vector recall needs a query vector, or a query text and an embedder",
                ));
            }
        }
        let mut kw_hits: Vec<(u64, f32)> = Vec::new();
        if want_kw && !req.query.trim().is_empty() {
            let hits = t.search_text(&req.query, None)?;
            if !hits.is_empty() {
                let allowed = match filtered {
                    Some(ids) => ids,
                    None => self.candidate_ids(&t, &pred, None)?,
                };
                for h in hits {
                    if allowed.binary_search(&h.id).is_ok() {
                        kw_hits.push((h.id, h.score));
                        if kw_hits.len() == depth {
                            break;
                        }
                    }
                }
            }
        }
        let (kw_w, vec_w, rrf) = match req.mode {
            RecallMode::Hybrid { keyword_weight, vector_weight } => {
                (keyword_weight, vector_weight, true)
            }
            _ => (1.0, 1.0, false),
        };
        // (score, vector channel, keyword channel) per id.
        pub(super) type Fused = (f32, Option<(usize, f32)>, Option<(usize, f32)>);
        let mut fused: HashMap<u64, Fused> = HashMap::new();
        for (rank, (id, sim)) in vec_hits.iter().enumerate() {
            let e = fused.entry(*id).or_default();
            e.1 = Some((rank + 1, *sim));
            e.0 += if rrf { vec_w / (60.0 + (rank + 1) as f32) } else { *sim };
        }
        for (rank, (id, bm25)) in kw_hits.iter().enumerate() {
            let e = fused.entry(*id).or_default();
            e.2 = Some((rank + 1, *bm25));
            e.0 += if rrf { kw_w / (60.0 + (rank + 1) as f32) } else { *bm25 };
        }
        let mut ranked: Vec<(u64, Fused)> = fused.into_iter().collect();
        ranked.sort_by(|a, b| b.1.0.total_cmp(&a.1.0).then(a.0.cmp(&b.0)));
        ranked.truncate(req.k);
        let ids: Vec<u64> = ranked.iter().map(|(id, _)| *id).collect();
        let rows = t.get_many_columns(&ids, &COLUMNS)?;
        let mut items: HashMap<u64, MemoryItem> = (0..rows.num_rows())
            .map(|i| item_of(&Row::from_batch(&rows, i)))
            .map(|it| (it.id, it))
            .collect();
        Ok(ranked
            .into_iter()
            .filter_map(|(id, (score, vector, keyword))| {
                items.remove(&id).map(|item| RecallHit { item, score, vector, keyword })
            })
            .collect())
    }
}
