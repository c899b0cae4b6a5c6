//! Writing a segment's files with tantivy's public serializers: postings, positions and
//! term dictionary per text field, the `_id` postings, fast field and document store.
//!
//! Part of the bulk build (see the module doc of `bulk`).

use super::*;

/// Memory buffers for one field's sections of the term, postings and positions files, of
/// about the sizes they will reach (growing a large buffer copies it).
pub(super) fn buffers(terms: usize, occurrences: usize) -> [CountingWriter<Vec<u8>>; 3] {
    [terms * 12, terms * 4 + occurrences * 2, occurrences * 2]
        .map(|cap| CountingWriter::wrap(Vec::with_capacity(cap)))
}

pub(super) fn finish_buffers(b: [CountingWriter<Vec<u8>>; 3]) -> [Vec<u8>; 3] {
    b.map(CountingWriter::finish)
}

pub(super) fn norms_reader(norms: &[u8]) -> io::Result<FieldNormReader> {
    FieldNormReader::open(FileSlice::from(norms.to_vec())).map_err(io::Error::other)
}

/// The first eight bytes of a term as a big-endian number (zero-padded): ordering by it,
/// then by the whole term, is the terms' byte order.
pub(super) fn prefix_key(b: &[u8]) -> u64 {
    let mut k = [0u8; 8];
    let l = b.len().min(8);
    k[..l].copy_from_slice(&b[..l]);
    u64::from_be_bytes(k)
}

/// Writes one field's term dictionary, postings and positions — what tantivy's
/// `FieldSerializer` writes, term by term, with one saving: a term in fewer documents than
/// a block (128) never gets a full block, so the BM25 block maxima `FieldSerializer`
/// prepares for every term are never used for it; such terms go through a postings
/// serializer without field norms, which skips that preparation (the bytes are the same).
/// A term with at least a block of documents gets a fresh serializer with the field norms.
pub(super) struct TermWriter<'a> {
    pub(super) dict: TermDictionaryBuilder<&'a mut CountingWriter<Vec<u8>>>,
    pub(super) postings_write: &'a mut CountingWriter<Vec<u8>>,
    pub(super) postings_start: u64,
    pub(super) positions: Option<PositionSerializer<&'a mut CountingWriter<Vec<u8>>>>,
    /// For terms in fewer than a block of documents (never holds a full block, so its
    /// last encoded document stays 0 between terms, as a cleared serializer's does).
    pub(super) small: PostingsSerializer,
    /// The current term's serializer when it has a block of documents or more.
    pub(super) big: Option<PostingsSerializer>,
    pub(super) option: IndexRecordOption,
    pub(super) norms: FieldNormReader,
    pub(super) avg_fieldnorm: f32,
    pub(super) info: TermInfo,
}

/// Documents per postings block (tantivy's `COMPRESSION_BLOCK_SIZE`).
pub(super) const BLOCK: u32 = 128;

impl<'a> TermWriter<'a> {
    pub(super) fn create(
        option: IndexRecordOption,
        total_tokens: u64,
        norms: FieldNormReader,
        [terms, postings, positions]: &'a mut [CountingWriter<Vec<u8>>; 3],
    ) -> io::Result<TermWriter<'a>> {
        postings.write_all(&total_tokens.to_le_bytes())?;
        let postings_start = postings.written_bytes();
        let avg_fieldnorm = total_tokens as f32 / norms.num_docs() as f32;
        Ok(TermWriter {
            dict: TermDictionaryBuilder::create(terms)?,
            postings_write: postings,
            postings_start,
            positions: option.has_positions().then(|| PositionSerializer::new(positions)),
            small: PostingsSerializer::new(avg_fieldnorm, option, None),
            big: None,
            option,
            norms,
            avg_fieldnorm,
            info: TermInfo::default(),
        })
    }

    pub(super) fn serializer(&mut self) -> &mut PostingsSerializer {
        self.big.as_mut().unwrap_or(&mut self.small)
    }

    /// Starts a term in `doc_freq` documents (`record_tf`: whether frequencies are kept).
    pub(super) fn new_term(&mut self, doc_freq: u32, record_tf: bool) {
        let addr = (self.postings_write.written_bytes() - self.postings_start) as usize;
        let pos = self.positions.as_ref().map_or(0, |p| p.written_bytes() as usize);
        self.info = TermInfo { doc_freq: 0, postings_range: addr..addr, positions_range: pos..pos };
        self.big = (doc_freq >= BLOCK).then(|| {
            PostingsSerializer::new(self.avg_fieldnorm, self.option, Some(self.norms.clone()))
        });
        self.serializer().new_term(doc_freq, record_tf);
    }

    pub(super) fn write_doc(&mut self, doc: DocId, tf: u32, position_deltas: &[u32]) {
        self.info.doc_freq += 1;
        self.serializer().write_doc(doc, tf);
        if let Some(p) = &mut self.positions {
            p.write_positions_delta(position_deltas);
        }
    }

    pub(super) fn close_term(&mut self, term: &[u8]) -> io::Result<()> {
        let doc_freq = self.info.doc_freq;
        let w = &mut *self.postings_write;
        self.big.as_mut().unwrap_or(&mut self.small).close_term(doc_freq, w)?;
        self.info.postings_range.end =
            (self.postings_write.written_bytes() - self.postings_start) as usize;
        if let Some(p) = &mut self.positions {
            p.close_term()?;
            self.info.positions_range.end = p.written_bytes() as usize;
        }
        self.dict.insert(term, &self.info)
    }

    pub(super) fn close(self) -> io::Result<()> {
        if let Some(p) = self.positions {
            p.close()?;
        }
        self.dict.finish().map(|_| ())
    }
}

/// Serializes a text field's postings, as tantivy's writer would from the same documents.
pub(super) fn text_field(
    field: Field,
    o: Occurrences,
    option: IndexRecordOption,
) -> io::Result<FieldPart> {
    let Occurrences { terms, occ, norms, tokens } = o;
    let nt = terms.len();
    if nt == 0 {
        return Ok(FieldPart { field, norms, sections: None });
    }
    let mut order: Vec<(u64, u32)> =
        (0..nt as u32).map(|t| (prefix_key(terms.get(t)), t)).collect();
    order.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| terms.get(a.1).cmp(terms.get(b.1))));
    let mut rank = vec![0u32; nt];
    for (r, &(_, t)) in order.iter().enumerate() {
        rank[t as usize] = r as u32;
    }
    // Counting sort of the occurrences by term rank (stable: documents and positions stay
    // in order within a term).
    let mut start = vec![0usize; nt + 1];
    for o in &occ {
        start[rank[o[0] as usize] as usize + 1] += 1;
    }
    for i in 0..nt {
        start[i + 1] += start[i];
    }
    let mut fill = start.clone();
    let mut grouped = vec![(0u32, 0u32); occ.len()];
    for o in &occ {
        let r = rank[o[0] as usize] as usize;
        grouped[fill[r]] = (o[1], o[2]);
        fill[r] += 1;
    }
    drop(occ);
    let mut b = buffers(nt, grouped.len());
    let mut fs = TermWriter::create(option, tokens, norms_reader(&norms)?, &mut b)?;
    let mut deltas = Vec::new();
    for (r, &(_, t)) in order.iter().enumerate() {
        let group = &grouped[start[r]..start[r + 1]];
        let mut doc_freq = 0u32;
        let mut prev = NULL;
        for &(d, _) in group {
            doc_freq += u32::from(d != prev);
            prev = d;
        }
        fs.new_term(doc_freq, true);
        let mut i = 0;
        while i < group.len() {
            let doc = group[i].0;
            deltas.clear();
            let mut prev_plus_one = 1u32;
            while i < group.len() && group[i].0 == doc {
                let plus_one = group[i].1.wrapping_add(1);
                deltas.push(plus_one.wrapping_sub(prev_plus_one));
                prev_plus_one = plus_one;
                i += 1;
            }
            fs.write_doc(doc, deltas.len() as u32, &deltas);
        }
        fs.close_term(terms.get(t))?;
    }
    fs.close()?;
    Ok(FieldPart { field, norms, sections: Some(finish_buffers(b)) })
}

/// Serializes the `_id` field's postings: one term (the big-endian id) per row.
pub(super) fn id_postings(
    field: Field,
    ids: &[u64],
    option: IndexRecordOption,
) -> io::Result<FieldPart> {
    let norms = vec![FieldNormReader::fieldnorm_to_id(1); ids.len()];
    if ids.is_empty() {
        return Ok(FieldPart { field, norms, sections: None });
    }
    let mut pairs: Vec<(u64, u32)> = ids.iter().zip(0u32..).map(|(&id, d)| (id, d)).collect();
    if !pairs.is_sorted() {
        pairs.sort_unstable();
    }
    let mut b = buffers(ids.len(), 0);
    let mut fs = TermWriter::create(option, ids.len() as u64, norms_reader(&norms)?, &mut b)?;
    let mut i = 0;
    while i < pairs.len() {
        let id = pairs[i].0;
        fs.new_term(0, false);
        while i < pairs.len() && pairs[i].0 == id {
            fs.write_doc(pairs[i].1, 0, &[]);
            i += 1;
        }
        fs.close_term(&id.to_be_bytes())?;
    }
    fs.close()?;
    Ok(FieldPart { field, norms, sections: Some(finish_buffers(b)) })
}

/// Writes the segment's fast fields (`_id`) and its document store (one empty document per
/// row: nothing is stored).
pub(super) fn fast_and_store(segment: &Segment, schema: &Schema, ids: &[u64]) -> Result<()> {
    let open = |c: SegmentComponent| {
        segment.open_write(c).map_err(|e| Error::Tantivy {
            action: "create a segment file",
            source: tantivy::TantivyError::from(e),
        })
    };
    let mut columns = ColumnarWriter::default();
    columns.record_column_type(crate::ID_FIELD, ColumnType::U64, false);
    for (&id, doc) in ids.iter().zip(0u32..) {
        columns.record_numerical(doc, crate::ID_FIELD, NumericalValue::U64(id));
    }
    let mut w = open(SegmentComponent::FastFields)?;
    columns.serialize(ids.len() as u32, None, &mut w).map_err(io_err("write fast fields"))?;
    w.terminate().map_err(io_err("write fast fields"))?;

    let settings = segment.index().settings();
    let mut store = StoreWriter::new(
        open(SegmentComponent::Store)?,
        settings.docstore_compression,
        settings.docstore_blocksize,
        settings.docstore_compress_dedicated_thread,
    )
    .map_err(io_err("write the document store"))?;
    let empty = TantivyDocument::new();
    for _ in ids {
        store.store(&empty, schema).map_err(io_err("write the document store"))?;
    }
    store.close().map_err(io_err("write the document store"))
}
