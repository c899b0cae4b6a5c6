//! Opening a memory store (its tables, the registry row, the model check), checkpoints
//! of the store, namespace registration, TTL sweeping, the embedder.
//!
//! Part of the memory store (see the module doc of `memory`).

use super::*;

impl MemoryStore {
    /// Opens the store `name` on `db`, creating its tables on first use (the items table
    /// `name`, its history `name__history`, a full-text index on the text, and a row in
    /// `basalt_memory_stores`). An existing store must have the same model and dimension.
    pub fn open(db: &Database, name: &str, config: MemoryConfig) -> Res<MemoryStore> {
        let store = MemoryStore {
            db: db.clone(),
            name: name.into(),
            history: format!("{name}__history"),
            namespaces: format!("{name}__namespaces"),
            embedder: None,
            known: Default::default(),
            schemas: (Arc::new(items_schema(config.dim)), Arc::new(history_schema())),
            group: WriteGroup::default(),
            constants: Constants::new(),
            dedupe: db.inner.memory_dedupe.lock().entry(name.to_string()).or_default().clone(),
            config,
        };
        if store.config.dim == 0 {
            return Err(store.invalid("the vector dimension must be at least 1"));
        }
        let tables = db.list_tables();
        if !tables.iter().any(|t| t == REGISTRY) {
            db.create_table(
                REGISTRY,
                &Schema::new(vec![
                    Field::new("store", DataType::Utf8, false),
                    Field::new("model", DataType::Utf8, false),
                    Field::new("dim", DataType::Int64, false),
                ]),
            )?;
        }
        let registry = db.table(REGISTRY)?;
        let mut found = None;
        for b in registry.scan_where(&["model", "dim"], &Predicate::eq("store", name))? {
            let b = b?;
            if b.num_rows() > 0 {
                let r = Row::from_batch(&b, 0);
                found = Some((
                    text_of(r.get("model")).unwrap_or_default(),
                    int_of(r.get("dim")) as usize,
                ));
            }
        }
        match found {
            Some((model, dim)) => {
                store.same_model((&model, dim), (&store.config.model, store.config.dim))?;
            }
            None => {
                store.create_tables()?;
                registry.insert_row(
                    Row::new()
                        .set("store", name)
                        .set("model", store.config.model.as_str())
                        .set("dim", store.config.dim as i64),
                )?;
            }
        }
        // Rows may have been written by other means since an index was built.
        *store.dedupe.lock() = None;
        // A read-only handle (another process's writer owns the store) changes nothing.
        if db.is_read_only() {
            return Ok(store);
        }
        // Stores made before namespace registration existed lack the table.
        if !db.list_tables().contains(&store.namespaces) {
            db.create_table(
                &store.namespaces,
                &Schema::new(vec![Field::new("namespace", DataType::Utf8, false)]),
            )?;
        }
        // Expired items are invisible from the moment they expire; opening reclaims them.
        store.sweep_expired()?;
        Ok(store)
    }

    /// Saves the store as it is now (items, history, registered namespaces) under `name`:
    /// a checkpoint of the database (cheap: its files are kept, nothing is copied).
    pub fn checkpoint(&self, name: &str) -> Res<()> {
        self.db.checkpoint(&self.checkpoint_name(name))
    }

    /// Brings the store back to checkpoint `name`: items, versions, history and registered
    /// namespaces become what they were, the full-text index is rebuilt; other tables of
    /// the database are untouched and ids handed out since are never reused. A restore is
    /// not a change-feed event: subscribers that mirror the store read it again.
    pub fn restore(&self, name: &str) -> Res<()> {
        let tables = [self.name.as_str(), self.history.as_str(), self.namespaces.as_str()];
        self.db.restore_tables(&self.checkpoint_name(name), &tables)?;
        self.known.lock().clear();
        *self.dedupe.lock() = None;
        Ok(())
    }

    /// Drops checkpoint `name` of the store (and the files only it kept).
    pub fn drop_checkpoint(&self, name: &str) -> Res<()> {
        self.db.drop_checkpoint(&self.checkpoint_name(name))
    }

    /// The store's checkpoints, sorted.
    pub fn checkpoints(&self) -> Res<Vec<String>> {
        let prefix = self.checkpoint_name("");
        Ok(self
            .db
            .list_checkpoints()?
            .into_iter()
            .filter_map(|c| c.strip_prefix(&prefix).map(str::to_string))
            .collect())
    }

    pub(super) fn checkpoint_name(&self, name: &str) -> String {
        format!("{}__cp__{name}", self.name)
    }

    /// Registers `namespace` (and so everything below it) for a strict store; registering
    /// twice is harmless. Works on any store.
    pub fn register_namespace(&self, namespace: &str) -> Res<()> {
        self.check_namespace_form(namespace, false)?;
        if self.registered(namespace)? {
            return Ok(());
        }
        self.db.table(&self.namespaces)?.insert_row(Row::new().set("namespace", namespace))?;
        self.known.lock().insert(namespace.to_string());
        Ok(())
    }

    /// The registered namespaces, sorted.
    pub fn registered_namespaces(&self) -> Res<Vec<String>> {
        let mut out = std::collections::BTreeSet::new();
        // (Absent on a read-only handle of a store made before registration existed.)
        let Ok(table) = self.db.table(&self.namespaces) else { return Ok(Vec::new()) };
        for b in table.scan_columns(&["namespace"])? {
            let b = b?;
            for i in 0..b.num_rows() {
                if let Some(ns) = text_of(Row::from_batch(&b, i).get("namespace")) {
                    out.insert(ns);
                }
            }
        }
        *self.known.lock() = out.clone();
        Ok(out.into_iter().collect())
    }

    /// Whether `ns` or one of its ancestors is registered.
    pub(super) fn registered(&self, ns: &str) -> Res<bool> {
        let covered = |known: &std::collections::BTreeSet<String>| {
            let mut prefix = String::new();
            ns.split('/').any(|seg| {
                if !prefix.is_empty() {
                    prefix.push('/');
                }
                prefix.push_str(seg);
                known.contains(&prefix)
            })
        };
        if covered(&self.known.lock()) {
            return Ok(true);
        }
        let all = self.registered_namespaces()?;
        Ok(covered(&all.into_iter().collect()))
    }

    /// Deletes expired items for good (their full-text entries with them), each with an
    /// `expire` history entry; returns how many. Expired items are invisible to every read
    /// from the moment they expire; sweeping reclaims their space (run it on a timer; every
    /// open sweeps too).
    pub fn sweep_expired(&self) -> Res<u64> {
        let now = now_ms();
        self.forget_where("expire", |t| {
            let mut out = Vec::new();
            for b in t.scan_where(&COLUMNS, &Predicate::cmp("expires_ms", CmpOp::LtEq, now))? {
                let b = b?;
                for i in 0..b.num_rows() {
                    out.push(item_of(&Row::from_batch(&b, i)));
                }
            }
            Ok(out)
        })
    }

    pub(super) fn create_tables(&self) -> Res<()> {
        let tables = self.db.list_tables();
        if !tables.contains(&self.name) {
            let t = self.db.create_table(&self.name, &self.schemas.0)?;
            t.create_fts_index(&["text"], Tokenizer::English)?;
        }
        if !tables.contains(&self.history) {
            self.db.create_table(&self.history, &self.schemas.1)?;
        }
        Ok(())
    }

    /// Uses `embedder` for texts written or recalled without a vector; its model and
    /// dimension must be the store's.
    pub fn with_embedder(mut self, embedder: Arc<dyn Embedder>) -> Res<MemoryStore> {
        self.same_model((&self.config.model, self.config.dim), (embedder.model(), embedder.dim()))?;
        self.embedder = Some(embedder);
        Ok(self)
    }

    /// Refuses `asked` (model, dimension) where the store holds `have`.
    pub(super) fn same_model(&self, have: (&str, usize), asked: (&str, usize)) -> Res<()> {
        if have == asked {
            return Ok(());
        }
        Err(MemoryError::ModelMismatch {
            store: self.name.clone(),
            have_model: have.0.into(),
            have_dim: have.1,
            model: asked.0.into(),
            dim: asked.1,
        }
        .into())
    }

    /// The store's name (its items table).
    pub fn name(&self) -> &str {
        &self.name
    }
}
