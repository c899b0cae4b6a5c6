//! `BasaltGroupBy`: the exec that groups a scan's rows by dictionary codes, with its
//! memory accounting and the fallback to the aggregate it replaced.
//!
//! Part of the fused group-by (see the module doc of `fused`).

use super::*;

/// Group-by on dictionary codes over a Basalt snapshot, with DataFusion's accumulators.
#[derive(Debug, Clone)]
pub struct GroupByExec {
    pub(super) table: String,
    pub(super) snapshot: Arc<TableSnapshot>,
    /// Full-schema positions the scan read (scan output column `i` is `projection[i]`).
    pub(super) projection: Vec<usize>,
    pub(super) predicate: Option<Predicate>,
    pub(super) groups: Vec<Vec<ScanUnit>>,
    /// Scan output positions of the group columns.
    pub(super) keys: Vec<usize>,
    /// The input when it is a dictionary join probing the snapshot (its output, with the
    /// probe columns as codes, is what is grouped); `None`: the scan itself.
    pub(super) join: Option<Arc<DictJoinExec>>,
    pub(super) aggs: Vec<Arc<AggregateFunctionExpr>>,
    /// `Partial`: emit states (the final aggregate above merges them); `Single`: values.
    pub(super) partial: bool,
    /// The scan's output schema (what the aggregate expressions are evaluated against).
    pub(super) input_schema: SchemaRef,
    pub(super) schema: SchemaRef,
    pub(super) props: Arc<PlanProperties>,
    /// The aggregate this replaced (same input partitions), run for a partition whose
    /// groups outgrow the memory limit.
    pub(super) fallback: Arc<dyn ExecutionPlan>,
    pub(super) metrics: ExecutionPlanMetricsSet,
}

/// Whether `plan` is a Basalt scan under zero or more projections.
fn over_scan(plan: &Arc<dyn ExecutionPlan>) -> bool {
    match plan.downcast_ref::<ProjectionExec>() {
        Some(p) => over_scan(p.input()),
        None => plan.downcast_ref::<ScanExec>().is_some(),
    }
}

/// `agg` over the projection `p` as the same aggregate straight over `p`'s input: the
/// projection's expressions inlined into the group expressions and the aggregates'
/// arguments (DataFusion puts expressions an aggregate reads, `l_price * (1 - l_disc)`, in
/// such a projection, sometimes a chain of them: each is inlined in turn). Used when:
/// 1. the aggregate is `Partial` or `Single` (what the fused group-by replaces), without a
///    grouping set, a limit or `FILTER` clauses (none of which the rewrite carries over);
/// 2. every projection expression is immutable (inlining may evaluate one more than once);
/// 3. every aggregate can be rebuilt over the new arguments.
fn inlined(agg: &AggregateExec, p: &ProjectionExec) -> Result<Option<AggregateExec>> {
    let exprs = p.expr();
    let g = agg.group_expr();
    if !matches!(agg.mode(), AggregateMode::Partial | AggregateMode::Single)
        || g.has_grouping_set()
        || agg.limit_options().is_some()
        || agg.filter_expr().iter().any(Option::is_some)
        || !exprs.iter().all(|e| crate::exec::entry::immutable(&e.expr))
    {
        return Ok(None);
    }
    let unproject = |e: &Arc<dyn PhysicalExpr>| update_expr(e, exprs, true);
    let all = |es: Vec<Arc<dyn PhysicalExpr>>| -> Result<Option<Vec<Arc<dyn PhysicalExpr>>>> {
        let mut out = Vec::with_capacity(es.len());
        for e in &es {
            let Some(u) = unproject(e)? else { return Ok(None) };
            out.push(u);
        }
        Ok(Some(out))
    };
    let Some(keys) = all(g.expr().iter().map(|(e, _)| e.clone()).collect())? else {
        return Ok(None);
    };
    let groups = keys.into_iter().zip(g.expr().iter().map(|(_, name)| name.clone())).collect();
    let mut aggs = Vec::with_capacity(agg.aggr_expr().len());
    for a in agg.aggr_expr() {
        let Some(args) = all(a.expressions())? else { return Ok(None) };
        let orders: Vec<Arc<dyn PhysicalExpr>> =
            a.order_bys().iter().map(|o| o.expr.clone()).collect();
        let Some(orders) = all(orders)? else { return Ok(None) };
        let Some(rebuilt) = a.with_new_expressions(args, orders) else { return Ok(None) };
        aggs.push(Arc::new(rebuilt));
    }
    let input = p.input().clone();
    let filters = vec![None; aggs.len()];
    AggregateExec::try_new(
        *agg.mode(),
        PhysicalGroupBy::new_single(groups),
        aggs,
        filters,
        input.clone(),
        input.schema(),
    )
    .map(Some)
}

impl GroupByExec {
    /// The fused form of `agg`, when it applies (see the module docs); an aggregate over a
    /// projection of a scan is first rewritten over the scan ([`inlined`]).
    pub fn fuse(agg: &AggregateExec) -> Result<Option<GroupByExec>> {
        if let Some(p) = agg.input().downcast_ref::<ProjectionExec>()
            && over_scan(p.input())
        {
            let Some(over_scan) = inlined(agg, p)? else { return Ok(None) };
            return Ok(GroupByExec::fuse(&over_scan)?.and_then(|g| g.with_schema(agg.schema())));
        }
        let partial = match agg.mode() {
            AggregateMode::Partial => true,
            AggregateMode::Single => false,
            _ => return Ok(None),
        };
        let input = agg.input();
        let join = input.downcast_ref::<DictJoinExec>().filter(|j| !j.has_fetch());
        let (snapshot, projection, predicate, groups) =
            match (input.downcast_ref::<ScanExec>(), join) {
                (Some(scan), _) => {
                    let Some(ScanParts { snapshot, projection, predicate, groups }) = scan.parts()
                    else {
                        return Ok(None);
                    };
                    (snapshot, projection.to_vec(), predicate, groups)
                }
                // The join's output columns stand for the scan's: a group column must be one of
                // its probe columns (see `full` below).
                (None, Some(j)) => (j.snapshot(), Vec::new(), j.predicate(), j.groups()),
                (None, None) => return Ok(None),
            };
        let g = agg.group_expr();
        if g.has_grouping_set() || agg.limit_options().is_some() {
            return Ok(None);
        }
        // Without GROUP BY only aggregates folded here gain anything: DataFusion's scalar
        // accumulators already run vectorised kernels.
        let input = agg.input_schema();
        if g.is_empty()
            && !agg
                .aggr_expr()
                .iter()
                .all(|a| counts_rows(a) || counts_if(a).is_some() || native_of(a, &input).is_some())
        {
            return Ok(None);
        }
        if agg.filter_expr().iter().any(Option::is_some) {
            return Ok(None);
        }
        let mut keys = Vec::new();
        for (e, _) in g.expr() {
            let Some(c) = e.downcast_ref::<Column>() else { return Ok(None) };
            let full = match join {
                Some(j) => j.probe_column(c.index()),
                None => projection.get(c.index()).copied(),
            };
            let Some(full) = full else { return Ok(None) };
            if !snapshot.is_dictionary_encoded(full) {
                return Ok(None);
            }
            keys.push(c.index());
        }
        for a in agg.aggr_expr() {
            if a.is_distinct() || !a.order_bys().is_empty() || !a.groups_accumulator_supported() {
                return Ok(None);
            }
        }
        let schema = agg.schema();
        let props = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(groups.len().max(1)),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        Ok(Some(GroupByExec {
            table: snapshot.name().to_string(),
            snapshot: snapshot.clone(),
            projection,
            predicate: predicate.cloned(),
            groups: groups.to_vec(),
            keys,
            join: join.map(|j| Arc::new(j.clone())),
            aggs: agg.aggr_expr().to_vec(),
            partial,
            input_schema: agg.input_schema(),
            schema,
            props: Arc::new(props),
            fallback: Arc::new(agg.clone()),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }

    /// Whether it groups a dictionary join's output (which builds a hash table).
    pub(crate) fn over_join(&self) -> bool {
        self.join.is_some()
    }

    /// The same exec declaring `schema` as its output (other field names or nullability),
    /// when its columns have `schema`'s types.
    pub(crate) fn with_schema(mut self, schema: SchemaRef) -> Option<GroupByExec> {
        let ours = self.schema.fields();
        if ours.len() != schema.fields().len()
            || ours.iter().zip(schema.fields()).any(|(a, b)| a.data_type() != b.data_type())
        {
            return None;
        }
        self.props = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            self.props.partitioning.clone(),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        self.schema = schema;
        Some(self)
    }

    /// Groups and aggregates the batches of one partition (its scan units, or the join's
    /// output over them, with codes where storage has them) into one batch.
    /// `None`: what it held grew past what the memory pool would give (nothing is
    /// emitted; the caller runs the aggregate it replaced instead).
    pub(super) fn run(
        &self,
        batches: impl Iterator<Item = Result<RecordBatch>>,
        reservation: &mut MemoryReservation,
    ) -> Result<Option<RecordBatch>> {
        let scalar = self.keys.is_empty();
        let mut grouper = Grouper::new(self.keys.len());
        let mut accs = self
            .aggs
            .iter()
            .map(|a| {
                if counts_rows(a) {
                    return Ok(Acc::Rows(Vec::new()));
                }
                if let Some(p) = counts_if(a) {
                    return Ok(Acc::RowsIf(p, Vec::new()));
                }
                let acc = a.create_groups_accumulator()?;
                Ok(match native_of(a, &self.input_schema) {
                    Some((op, col, target)) => Acc::Native(Native { op, col, target, acc }),
                    None => Acc::Df(acc),
                })
            })
            .collect::<Result<Vec<Acc>>>()?;
        // What DataFusion's accumulators are evaluated on: the scan's columns they read,
        // as values; the others as NULL placeholders (no allocation).
        let read: Vec<bool> =
            (0..self.input_schema.fields().len()).map(|i| self.reads(i)).collect();
        let loose = Arc::new(datafusion::arrow::datatypes::Schema::new(
            self.input_schema
                .fields()
                .iter()
                .zip(&read)
                .map(|(f, &r)| {
                    let f = f.as_ref().clone().with_nullable(true);
                    if r { f } else { f.with_data_type(DataType::Null) }
                })
                .collect::<Vec<_>>(),
        ));
        let need_ids = accs.iter().any(|a| matches!(a, Acc::Df(_)));
        // Only rows per group wanted (`COUNT(*)`, or nothing: `DISTINCT`): one coded group
        // column is counted straight from its codes ([`Grouper::count_codes`]).
        let rows_only = accs.iter().all(|a| matches!(a, Acc::Rows(_)));
        let need_values = need_ids || accs.iter().any(|a| matches!(a, Acc::RowsIf(..)));
        // Per batch and key: rows whose condition holds (`Acc::RowsIf`).
        let mut tally: Vec<i64> = Vec::new();
        // Per batch: each row's key (none when scalar), rows per key, each key's group.
        let mut keys: Vec<u32> = Vec::new();
        let mut rows: Vec<u64> = Vec::new();
        let mut ids: Vec<usize> = Vec::new();
        let mut any_rows = false;
        for b in batches {
            let b = b?;
            let n = b.num_rows();
            if n == 0 {
                continue;
            }
            any_rows = true;
            let gid: Vec<usize> = if scalar {
                rows.clear();
                rows.push(n as u64);
                vec![0]
            } else {
                let key_cols: Vec<&ArrayRef> = self.keys.iter().map(|&c| b.column(c)).collect();
                let counted = match key_cols.as_slice() {
                    [col] if rows_only => grouper.count_codes(col, accs.is_empty(), &mut rows)?,
                    _ => None,
                };
                if counted.is_some() {
                    grouper.assign(&rows)
                } else {
                    match grouper.local_codes(&key_cols, &mut keys)? {
                        Some(space) => {
                            count_keys(&keys, space, &mut rows);
                            grouper.assign(&rows)
                        }
                        None => {
                            ids.clear();
                            ids.resize(n, 0);
                            for (k, col) in key_cols.iter().enumerate() {
                                grouper.add_column(k, col, &mut ids)?;
                            }
                            keys.clear();
                            for &g in &ids {
                                keys.push(u32::try_from(g).map_err(|_| {
                                    DataFusionError::Execution("more than 2^32 groups".into())
                                })?);
                            }
                            count_keys(&keys, grouper.len(), &mut rows);
                            (0..grouper.len()).collect()
                        }
                    }
                }
            };
            let total = if scalar { 1 } else { grouper.len() };
            let row_keys = (!scalar).then_some(keys.as_slice());
            // DataFusion's accumulators take a group id per row and values.
            if need_ids {
                ids.clear();
                match row_keys {
                    None => ids.resize(n, 0),
                    Some(k) => ids.extend(k.iter().map(|&k| gid[k as usize])),
                }
            }
            let batch = if need_values {
                let cols = self
                    .input_schema
                    .fields()
                    .iter()
                    .enumerate()
                    .map(|(i, f)| {
                        let c = b.column(i);
                        if !read[i] {
                            Ok(Arc::new(NullArray::new(n)) as ArrayRef)
                        } else if c.data_type() == f.data_type() {
                            Ok(c.clone())
                        } else {
                            cast(c, f.data_type()).map_err(DataFusionError::from)
                        }
                    })
                    .collect::<Result<Vec<_>>>()?;
                Some(RecordBatch::try_new(loose.clone(), cols)?)
            } else {
                None
            };
            for (acc, a) in accs.iter_mut().zip(&self.aggs) {
                match acc {
                    Acc::Rows(counts) => {
                        counts.resize(total, 0);
                        for (k, &r) in rows.iter().enumerate() {
                            if r > 0 {
                                counts[gid[k]] += r as i64;
                            }
                        }
                    }
                    Acc::RowsIf(p, counts) => {
                        let Some(batch) = &batch else {
                            return Err(DataFusionError::Internal("no values batch".into()));
                        };
                        let mask = p.evaluate(batch)?.into_array(n)?;
                        let Some(mask) = mask.as_any().downcast_ref::<BooleanArray>() else {
                            return Err(DataFusionError::Internal(
                                "a CASE condition that is not boolean".into(),
                            ));
                        };
                        // Rows where the condition is true (NULL is not).
                        let holds = match mask.nulls() {
                            Some(nb) => mask.values() & nb.inner(),
                            None => mask.values().clone(),
                        };
                        counts.resize(total, 0);
                        match row_keys {
                            None => counts[0] += holds.count_set_bits() as i64,
                            Some(k) => {
                                tally.clear();
                                tally.resize(rows.len(), 0);
                                for i in holds.set_indices() {
                                    tally[k[i] as usize] += 1;
                                }
                                for (key, &t) in tally.iter().enumerate() {
                                    if t > 0 {
                                        counts[gid[key]] += t;
                                    }
                                }
                            }
                        }
                    }
                    Acc::Native(x) => x.update(b.column(x.col), row_keys, &rows, &gid, total)?,
                    Acc::Df(acc) => {
                        let Some(batch) = &batch else {
                            return Err(DataFusionError::Internal("no values batch".into()));
                        };
                        let values = a
                            .expressions()
                            .iter()
                            .map(|e| e.evaluate(batch).and_then(|v| v.into_array(n)))
                            .collect::<Result<Vec<_>>>()?;
                        acc.update_batch(&values, &ids, None, total)?;
                    }
                }
            }
            // What the groups hold now counts against the memory limit; past it this
            // partition is DataFusion's aggregate's, which can spill or emit early.
            let held = grouper.bytes
                + accs.iter().map(Acc::size).sum::<usize>()
                + (keys.capacity() + tally.capacity()) * 8
                + (rows.capacity() + ids.capacity()) * std::mem::size_of::<usize>();
            if reservation.try_resize(held).is_err() {
                return Ok(None);
            }
        }
        if !scalar && grouper.len() == 0 {
            return Ok(Some(RecordBatch::new_empty(self.schema.clone())));
        }
        if scalar && !any_rows {
            // No rows: the one group still exists, with each aggregate's empty value. The
            // accumulators learn of the group from one filtered-out row (NULL arguments, a
            // false filter): given no row at all, DataFusion's accumulators take a group
            // they never saw a NULL for as one that saw values, and `min` / `max` / `sum`
            // over an empty table answered their starting values instead of NULL.
            let excluded = BooleanArray::from(vec![false]);
            for (acc, a) in accs.iter_mut().zip(&self.aggs) {
                let values = a
                    .expressions()
                    .iter()
                    .map(|e| Ok(new_null_array(&e.data_type(&self.input_schema)?, 1)))
                    .collect::<Result<Vec<_>>>()?;
                match acc {
                    Acc::Rows(_) | Acc::RowsIf(..) => {}
                    Acc::Native(Native { acc, .. }) | Acc::Df(acc) => {
                        acc.update_batch(&values, &[0], Some(&excluded), 1)?
                    }
                }
            }
        }
        let total = if scalar { 1 } else { grouper.len() };
        let mut cols: Vec<ArrayRef> =
            if scalar { Vec::new() } else { grouper.key_arrays(&self.schema)? };
        for acc in &mut accs {
            match acc {
                Acc::Rows(counts) | Acc::RowsIf(_, counts) => {
                    counts.resize(total, 0);
                    cols.push(Arc::new(Int64Array::from(std::mem::take(counts))));
                }
                Acc::Native(Native { acc, .. }) | Acc::Df(acc) => {
                    if self.partial {
                        cols.extend(acc.state(EmitTo::All)?)
                    } else {
                        cols.push(acc.evaluate(EmitTo::All)?)
                    }
                }
            }
        }
        let cols =
            cols.into_iter()
                .zip(self.schema.fields())
                .map(|(c, f)| {
                    if c.data_type() == f.data_type() {
                        Ok(c)
                    } else {
                        Ok(cast(&c, f.data_type())?)
                    }
                })
                .collect::<Result<Vec<_>>>()?;
        Ok(Some(RecordBatch::try_new(self.schema.clone(), cols)?))
    }

    /// Whether any aggregate reads scan column `i`.
    pub(super) fn reads(&self, i: usize) -> bool {
        self.aggs.iter().any(|a| {
            a.expressions().iter().any(|e| {
                let mut uses = false;
                let _ = e.apply(|x| {
                    if x.downcast_ref::<Column>().is_some_and(|c| c.index() == i) {
                        uses = true;
                        return Ok(TreeNodeRecursion::Stop);
                    }
                    Ok(TreeNodeRecursion::Continue)
                });
                uses
            })
        })
    }
}

impl DisplayAs for GroupByExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<&str> =
            self.keys.iter().map(|&k| self.input_schema.field(k).name().as_str()).collect();
        let aggs: Vec<&str> = self.aggs.iter().map(|a| a.name()).collect();
        write!(
            f,
            "BasaltGroupBy: table={}, mode={}, by=[{}], aggr=[{}]",
            self.table,
            if self.partial { "Partial" } else { "Single" },
            keys.join(", "),
            aggs.join(", ")
        )?;
        match &self.join {
            Some(j) => {
                write!(f, ", over ")?;
                j.fmt_as(t, f)?;
            }
            None => {
                if let Some(p) = &self.predicate {
                    write!(f, ", filter={p}")?;
                }
            }
        }
        Ok(())
    }
}

impl ExecutionPlan for GroupByExec {
    fn name(&self) -> &str {
        "BasaltGroupBy"
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        match &self.join {
            Some(j) => vec![j.build()],
            None => vec![],
        }
    }

    no_expressions!();

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let (Some(j), Some(build)) = (&self.join, children.pop()) else { return Ok(self) };
        let join = Arc::new(j.with_build(build));
        let same = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
        let fallback = self.fallback.clone().replace_children(vec![join.clone()], same)?;
        Ok(Arc::new(GroupByExec { join: Some(join), fallback, ..self.as_ref().clone() }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        use futures::StreamExt as _;
        let units = partition_units(&self.groups, partition, "BasaltGroupBy")?;
        let me = GroupByExec { groups: Vec::new(), ..self.clone() };
        // Spillable for the pool: refused, the group-by gives its memory back and the
        // aggregate it replaced (which spills) runs instead, so it must not take what the
        // operators beside it need.
        let mut reservation = MemoryConsumer::new(format!("BasaltGroupBy[{partition}]"))
            .with_can_spill(true)
            .register(context.memory_pool());
        let over_limit = MetricBuilder::new(&self.metrics).counter("over_memory_limit", partition);
        let schema = self.schema.clone();
        // The work happens when the stream is first polled (on DataFusion's runtime).
        Ok(deferred_stream(self.schema.clone(), async move {
            let out = match me.join.clone() {
                Some(j) => {
                    me.run(j.coded_batches(units, context.clone()).await?, &mut reservation)?
                }
                None => {
                    let scan = me
                        .snapshot
                        .scan_units_filtered(&me.projection, me.predicate.clone(), units)
                        .map_err(storage_err)?
                        .with_codes();
                    me.run(scan.map(|b| b.map_err(storage_err)), &mut reservation)?
                }
            };
            drop(reservation);
            Ok(match out {
                Some(b) => futures::stream::once(async move { Ok(b) }).boxed(),
                None => {
                    over_limit.add(1);
                    // Its batches under this exec's schema (the same types; field names or
                    // nullability may differ, see `with_schema`).
                    me.fallback
                        .execute(partition, context)?
                        .map(move |b| {
                            Ok(RecordBatch::try_new(schema.clone(), b?.columns().to_vec())?)
                        })
                        .boxed()
                }
            })
        }))
    }
}
