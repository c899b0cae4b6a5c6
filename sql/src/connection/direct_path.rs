//! The dispatcher's side of the direct path: classifying a statement for it, running it,
//! and the templates kept for prepared inserts and keyed statements.
//!
//! Part of the dispatcher (see the module doc of `connection`).

use super::*;

impl SqlConnection {
    /// Runs `stmt` on the direct path if it is one of its shapes ([`crate::direct`]);
    /// `None`: it is not, and DataFusion must run it. `planned`: the tables a prepared
    /// statement's plan scans, with their columns then (a table whose columns changed since
    /// gets the same error as on the planned path).
    pub(super) fn try_direct(
        &self,
        stmt: &Statement,
        params: &[ScalarValue],
        planned: Option<&[(String, SchemaRef)]>,
    ) -> Result<Option<Vec<RecordBatch>>> {
        let Some(d) = self.classify(stmt, params, planned, None)? else { return Ok(None) };
        self.run_direct(&d).map(Some)
    }

    /// Runs a statement the direct path classified.
    pub(super) fn run_direct(&self, d: &Direct) -> Result<Vec<RecordBatch>> {
        // Counted once the direct path is certain to run the statement.
        self.direct_runs.fetch_add(1, Ordering::Relaxed);
        match d {
            Direct::Select(s) => return s.run(),
            Direct::Aggregate(a) => return a.run(),
            _ => {}
        }
        let n = self.binding.session().lock().write(|txn, store| d.write(txn, store))?;
        dml_count(n)
    }

    /// [`SqlConnection::try_direct`] for a prepared statement: through its kept
    /// [`KeyedTemplate`] when it has one that applies, else by classifying it (and keeping
    /// the template when one can be made).
    pub(super) fn try_prepared_direct(
        &self,
        prepared: &Prepared,
        stmt: &Statement,
        params: &[ScalarValue],
    ) -> Result<Option<Vec<RecordBatch>>> {
        if let Some(b) = self.try_keyed(prepared, params)? {
            return Ok(Some(b));
        }
        if params.is_empty()
            && let Some(b) = self.try_kept_write(prepared)?
        {
            return Ok(Some(b));
        }
        if !params.is_empty()
            && let Some(b) = self.try_insert_template(prepared, params)?
        {
            return Ok(Some(b));
        }
        let mut template = None;
        let want = (!params.is_empty() && prepared.insert.get().is_none()).then_some(&mut template);
        let Some(d) = self.classify(stmt, params, Some(&prepared.scans), want)? else {
            return Ok(None);
        };
        if !params.is_empty() {
            let _ = prepared.insert.set(template);
        }
        if params.is_empty() && d.writes() {
            // This run runs what it classified; the first one keeps it for later runs.
            let r = self.run_direct(&d);
            if let Some(lower_idents) = self.lower_idents() {
                let _ = prepared.kept_write.set(KeptWrite { lower_idents, direct: d });
            }
            return r.map(Some);
        }
        if !params.is_empty()
            && prepared.keyed.get().is_none()
            && let Some(lower_idents) = self.lower_idents()
            && let Some(t) = KeyedTemplate::new(stmt, &d, lower_idents)
        {
            let _ = prepared.keyed.set(t);
        }
        self.run_direct(&d).map(Some)
    }

    /// Runs a prepared statement through its kept [`KeyedTemplate`]: `None` when it has
    /// none, or when anything classifying looks at differs from when it was kept (fast
    /// paths off, identifier folding, the table's columns, an external table of the same
    /// name, a parameter value of another kind), and then the statement is classified.
    pub(super) fn try_keyed(
        &self,
        prepared: &Prepared,
        params: &[ScalarValue],
    ) -> Result<Option<Vec<RecordBatch>>> {
        let Some(t) = prepared.keyed.get() else { return Ok(None) };
        let Some(filter) = t.filter(params) else { return Ok(None) };
        let Some(now) = self.still_applies(prepared, t.lower_idents(), t.table())? else {
            return Ok(None);
        };
        self.direct_runs.fetch_add(1, Ordering::Relaxed);
        self.keyed_runs.fetch_add(1, Ordering::Relaxed);
        if !t.writes() {
            return t.read(&now, &filter).map(Some);
        }
        let n = self.binding.session().lock().write(|txn, store| t.write(&filter, txn, store))?;
        dml_count(n).map(Some)
    }

    /// Runs a prepared `INSERT` with parameters through its kept [`InsertTemplate`]: `None`
    /// when it has none, when a parameter's value does not convert (or is NULL for a NOT
    /// NULL column), or when anything classifying looked at differs from when it was kept
    /// (see [`SqlConnection::still_applies`]); the statement is then classified.
    pub(super) fn try_insert_template(
        &self,
        prepared: &Prepared,
        params: &[ScalarValue],
    ) -> Result<Option<Vec<RecordBatch>>> {
        let Some(Some(t)) = prepared.insert.get() else { return Ok(None) };
        if self.still_applies(prepared, t.lower_idents(), t.table())?.is_none() {
            return Ok(None);
        }
        let Some(d) = t.direct(params) else { return Ok(None) };
        self.insert_template_runs.fetch_add(1, Ordering::Relaxed);
        self.run_direct(&d).map(Some)
    }

    /// Runs a prepared write without parameters through its [`KeptWrite`]: `None` when it
    /// has none, or when anything classifying looked at differs from when it was kept (fast
    /// paths off, identifier folding, the table's columns, an external table of the same
    /// name), and then the statement is classified again.
    pub(super) fn try_kept_write(&self, prepared: &Prepared) -> Result<Option<Vec<RecordBatch>>> {
        let Some(k) = prepared.kept_write.get() else { return Ok(None) };
        if self.still_applies(prepared, k.lower_idents, k.direct.table())?.is_none() {
            return Ok(None);
        }
        self.kept_write_runs.fetch_add(1, Ordering::Relaxed);
        self.run_direct(&k.direct).map(Some)
    }

    /// The table `name` as this session reads it now, when what a prepared statement kept
    /// from classifying (under identifier folding `lower_idents`, against the columns
    /// `prepared.scans` records) still holds: fast paths on, the same folding, no external
    /// table of that name, the same columns. `None` otherwise.
    pub(super) fn still_applies(
        &self,
        prepared: &Prepared,
        lower_idents: bool,
        name: &str,
    ) -> Result<Option<Arc<basalt_storage::TableSnapshot>>> {
        if !self.fast_paths.load(Ordering::Relaxed)
            || self.lower_idents() != Some(lower_idents)
            || self.schema.is_external(name)
        {
            return Ok(None);
        }
        let view = self.binding.session().lock().read_view()?;
        let Ok(now) = view.table(name) else { return Ok(None) };
        Ok((same_columns(&prepared.scans, name, &now) == Some(true)).then_some(now))
    }

    /// Whether unquoted identifiers fold to lower case, when unqualified names resolve to
    /// Basalt's tables (`None`: under another default catalog or schema they do not).
    pub(super) fn lower_idents(&self) -> Option<bool> {
        self.with_options(|o| {
            (o.catalog.default_catalog == "datafusion" && o.catalog.default_schema == "public")
                .then_some(o.sql_parser.enable_ident_normalization)
        })
    }

    /// The direct path's form of `stmt` with `params` (`None`: the direct path does not
    /// take it); `planned` as in [`SqlConnection::try_direct`].
    /// When `template` is given and the statement is an `INSERT … VALUES` with parameters
    /// the direct path takes, its [`InsertTemplate`] is put there.
    pub(super) fn classify(
        &self,
        stmt: &Statement,
        params: &[ScalarValue],
        planned: Option<&[(String, SchemaRef)]>,
        template: Option<&mut Option<InsertTemplate>>,
    ) -> Result<Option<Direct>> {
        if !self.fast_paths.load(Ordering::Relaxed) {
            return Ok(None);
        }
        if !matches!(
            stmt,
            Statement::Query(_)
                | Statement::Insert(_)
                | Statement::Update(_)
                | Statement::Delete(_)
        ) {
            return Ok(None);
        }
        let view = self.binding.session().lock().read_view()?;
        let table = |name: &str| {
            if self.schema.is_external(name) { None } else { view.table(name).ok() }
        };
        // Unqualified names resolve to Basalt's tables only under the default schema.
        let Some(lower_idents) = self.lower_idents() else { return Ok(None) };
        let env = direct::Env { lower_idents, params, table: &table };
        let Some(d) = direct::classify(stmt, &env) else { return Ok(None) };
        if let Some(slot) = template {
            *slot = InsertTemplate::new(stmt, &env);
        }
        if let Some(planned) = planned {
            let name = d.table();
            let now = view.table(name)?;
            let Some(same) = same_columns(planned, name, &now) else {
                return Ok(None);
            };
            if !same {
                return Err(Error::sql(format!(
                    "table '{name}' changed since this statement was planned; prepare it again"
                )));
            }
        }
        Ok(Some(d))
    }

    /// Prepares `sql` without entering the async runtime when the direct path takes it as
    /// it is (no placeholders): `None` otherwise (or while another statement of this
    /// connection runs), and then [`SqlConnection::prepare`] prepares it.
    pub fn prepare_direct(&self, sql: &str) -> Result<Option<Prepared>> {
        let Ok(_g) = self.gate.try_lock() else { return Ok(None) };
        let stmts = self.parse(sql)?;
        self.prepare_for_direct(&stmts)
    }

    /// The unplanned [`Prepared`] of a lone statement the direct path takes.
    pub(super) fn prepare_for_direct(&self, stmts: &[Stmt]) -> Result<Option<Prepared>> {
        let [Stmt::Df(DfStatement::Statement(stmt))] = stmts else { return Ok(None) };
        let Some(d) = self.classify(stmt, &[], None, None)? else { return Ok(None) };
        let name = d.table().to_string();
        let schema =
            self.binding.session().lock().read_view()?.table(&name)?.schema().full_schema().clone();
        Ok(Some(Prepared {
            plan: Arc::new(OnceLock::new()),
            stmt: Some(Arc::new(stmt.as_ref().clone())),
            scans: Arc::new(vec![(name, schema)]),
            optimized: None,
            keyed: Arc::new(OnceLock::new()),
            kept_write: Arc::new(OnceLock::new()),
            insert: Arc::new(OnceLock::new()),
            on_conflict: None,
            do_update: None,
        }))
    }

    /// Runs `sql` without entering the async runtime when it is one statement the direct
    /// path takes, or one transaction-control statement (`BEGIN`, `COMMIT`, `ROLLBACK`):
    /// `None` otherwise (or while another statement of this connection runs), and then
    /// [`SqlConnection::execute`] runs it.
    pub fn execute_direct(&self, sql: &str) -> Result<Option<Vec<RecordBatch>>> {
        let Ok(_g) = self.gate.try_lock() else { return Ok(None) };
        match self.parse(sql)?.as_slice() {
            [Stmt::Df(DfStatement::Statement(stmt))] => {
                // Transaction control needs neither DataFusion nor the runtime.
                if let Some(r) = self.transaction_control(stmt) {
                    return r.map(|()| Some(Vec::new()));
                }
                self.try_direct(stmt, &[], None)
            }
            _ => Ok(None),
        }
    }

    /// Runs a prepared statement on the direct path without entering the async runtime:
    /// `None` when it needs DataFusion (or another statement of this connection is
    /// running), and then [`SqlConnection::execute_prepared`] runs it. The result is the
    /// same either way; this saves simple statements the cost of building and moving the
    /// planner's future.
    pub fn execute_prepared_direct(
        &self,
        prepared: &Prepared,
        params: &[ScalarValue],
    ) -> Result<Option<Vec<RecordBatch>>> {
        let Ok(_g) = self.gate.try_lock() else { return Ok(None) };
        match &prepared.stmt {
            Some(stmt) => self.try_prepared_direct(prepared, stmt, params),
            None => Ok(None),
        }
    }
}
