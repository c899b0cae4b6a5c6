//! Agent memory from Python: `basalt::memory::MemoryStore` with items as dicts, metadata
//! filters written as dicts (`{"topic": "x", "n": {"$gt": 3}}`, `$and` / `$or` / `$not`),
//! Python callables as embedders, and subscriptions read as iterators. Owns only these
//! conversions; every rule about items is the engine's.

use std::sync::Arc;
use std::time::Duration;

use basalt::memory::{
    Embedder, Filter, HashEmbedder, MemoryConfig, MemoryEvent, MemoryEventKind, MemoryItem,
    MemoryStore, MemoryUpdate, NewMemory, Recall, RecallMode, Subscription,
};
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::Value as Json;

use crate::connection::NativeConnection;
use crate::errors::{IntoPy, bad_arg};

/// An embedder that calls a Python function `f(texts: list[str]) -> sequence of vectors`.
struct PyEmbedder {
    model: String,
    dim: usize,
    func: Py<PyAny>,
}

impl Embedder for PyEmbedder {
    fn model(&self) -> &str {
        &self.model
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        Python::attach(|py| {
            let out = self.func.call1(py, (texts.to_vec(),)).map_err(|e| e.to_string())?;
            let out = out.bind(py);
            let mut vectors = Vec::with_capacity(texts.len());
            for v in out.try_iter().map_err(|e| e.to_string())? {
                let v = v.map_err(|e| e.to_string())?;
                let v = if v.hasattr("tolist").unwrap_or(false) {
                    v.call_method0("tolist").map_err(|e| e.to_string())?
                } else {
                    v
                };
                vectors.push(v.extract::<Vec<f32>>().map_err(|e| e.to_string())?);
            }
            Ok(vectors)
        })
    }
}

/// A JSON value from its text (metadata and filters cross as JSON text).
fn json(text: Option<&str>) -> PyResult<Json> {
    match text {
        None => Ok(Json::Null),
        Some(t) => serde_json::from_str(t).map_err(|e| bad_arg(format!("not JSON: {e}"))),
    }
}

/// A metadata filter from its dict form (given as JSON text).
fn filter(text: Option<&str>) -> PyResult<Option<Filter>> {
    let Some(t) = text else { return Ok(None) };
    let f = parse_filter(&json(Some(t))?)?;
    f.validate().map_err(bad_arg)?;
    Ok(Some(f))
}

fn parse_filter(v: &Json) -> PyResult<Filter> {
    let Json::Object(map) = v else {
        return Err(bad_arg("a filter is a dict: {\"path\": value, \"n\": {\"$gt\": 3}, …}"));
    };
    let mut parts = Vec::new();
    for (k, v) in map {
        parts.push(match k.as_str() {
            "$and" | "$or" => {
                let Json::Array(items) = v else {
                    return Err(bad_arg(format!("{k} takes a list of filters")));
                };
                let fs = items.iter().map(parse_filter).collect::<PyResult<Vec<_>>>()?;
                if k == "$and" { Filter::And(fs) } else { Filter::Or(fs) }
            }
            "$not" => Filter::Not(Box::new(parse_filter(v)?)),
            path => match v {
                Json::Object(ops) if ops.keys().all(|o| o.starts_with('$')) && !ops.is_empty() => {
                    let mut fs = Vec::new();
                    for (op, arg) in ops {
                        let p = path.to_string();
                        fs.push(match op.as_str() {
                            "$eq" => Filter::Eq(p, arg.clone()),
                            "$ne" => Filter::Ne(p, arg.clone()),
                            "$gt" => Filter::Gt(p, arg.clone()),
                            "$gte" => Filter::Gte(p, arg.clone()),
                            "$lt" => Filter::Lt(p, arg.clone()),
                            "$lte" => Filter::Lte(p, arg.clone()),
                            "$contains" => Filter::Contains(p, arg.clone()),
                            "$in" => match arg {
                                Json::Array(a) => Filter::In(p, a.clone()),
                                _ => return Err(bad_arg("$in takes a list")),
                            },
                            "$exists" => match arg {
                                Json::Bool(true) => Filter::Exists(p),
                                Json::Bool(false) => Filter::Not(Box::new(Filter::Exists(p))),
                                _ => return Err(bad_arg("$exists takes true or false")),
                            },
                            other => {
                                return Err(bad_arg(format!(
                                    "unknown filter operator '{other}' ($eq, $ne, $gt, $gte, \
                                     $lt, $lte, $in, $contains, $exists)"
                                )));
                            }
                        });
                    }
                    if fs.len() == 1 { fs.remove(0) } else { Filter::And(fs) }
                }
                value => Filter::Eq(path.to_string(), value.clone()),
            },
        });
    }
    Ok(if parts.len() == 1 { parts.remove(0) } else { Filter::And(parts) })
}

fn json_to_py<'py>(py: Python<'py>, v: &Json) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Json::Null => py.None().into_bound(py),
        Json::Bool(b) => b.into_bound_py_any(py)?,
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_bound_py_any(py)?,
            (None, Some(u)) => u.into_bound_py_any(py)?,
            _ => n.as_f64().unwrap_or(f64::NAN).into_bound_py_any(py)?,
        },
        Json::String(s) => s.into_bound_py_any(py)?,
        Json::Array(a) => {
            PyList::new(py, a.iter().map(|x| json_to_py(py, x)).collect::<PyResult<Vec<_>>>()?)?
                .into_any()
        }
        Json::Object(m) => {
            let d = PyDict::new(py);
            for (k, x) in m {
                d.set_item(k, json_to_py(py, x)?)?;
            }
            d.into_any()
        }
    })
}

fn item<'py>(py: Python<'py>, it: &MemoryItem) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("id", it.id)?;
    d.set_item("namespace", &it.namespace)?;
    d.set_item("key", &it.key)?;
    d.set_item("text", &it.text)?;
    d.set_item("metadata", json_to_py(py, &it.metadata)?)?;
    d.set_item("vector", &it.vector)?;
    d.set_item("content_hash", it.content_hash)?;
    d.set_item("version", it.version)?;
    d.set_item("created_ms", it.created_ms)?;
    d.set_item("updated_ms", it.updated_ms)?;
    d.set_item("expires_ms", it.expires_ms)?;
    d.set_item("archived", it.archived)?;
    Ok(d)
}

fn new_memory(
    text: &str,
    metadata: Option<&str>,
    vector: Option<Vec<f32>>,
    ttl: Option<f64>,
) -> PyResult<NewMemory> {
    let mut m = NewMemory::text(text);
    if metadata.is_some() {
        m = m.metadata(json(metadata)?);
    }
    if let Some(v) = vector {
        m = m.vector(v);
    }
    if let Some(s) = ttl {
        if !s.is_finite() || s <= 0.0 {
            return Err(bad_arg("ttl is a positive number of seconds"));
        }
        m = m.ttl(Duration::from_secs_f64(s));
    }
    Ok(m)
}

/// A new item as `remember_many` takes it: text, metadata as JSON text, vector, TTL in
/// seconds.
type NewItem = (String, Option<String>, Option<Vec<f32>>, Option<f64>);

/// A memory store (the native half of `basalt.MemoryStore`).
#[pyclass(frozen, module = "basalt._basalt", name = "NativeMemory")]
pub struct NativeMemory {
    store: MemoryStore,
}

/// Opens (creating on first use) the memory store `name` on a connection's database.
#[pyfunction]
#[pyo3(signature = (conn, name, model, dim, embedder=None, dedupe_exact=true, dedupe_near=None, strict_namespaces=false, max_text_bytes=None, max_metadata_bytes=None))]
#[allow(clippy::too_many_arguments)]
pub fn open_memory(
    py: Python<'_>,
    conn: &NativeConnection,
    name: &str,
    model: &str,
    dim: usize,
    embedder: Option<Py<PyAny>>,
    dedupe_exact: bool,
    dedupe_near: Option<f32>,
    strict_namespaces: bool,
    max_text_bytes: Option<usize>,
    max_metadata_bytes: Option<usize>,
) -> PyResult<NativeMemory> {
    let db = conn.database()?;
    let mut cfg = MemoryConfig::new(model, dim);
    cfg.dedupe_exact = dedupe_exact;
    cfg.dedupe_near = dedupe_near;
    cfg.strict_namespaces = strict_namespaces;
    if let Some(n) = max_text_bytes {
        cfg.max_text_bytes = n;
    }
    if let Some(n) = max_metadata_bytes {
        cfg.max_metadata_bytes = n;
    }
    let embedder: Option<Arc<dyn Embedder>> = match embedder {
        None => None,
        Some(f) if f.bind(py).is_instance_of::<pyo3::types::PyString>() => {
            let kind: String = f.extract(py)?;
            match kind.as_str() {
                "hash" => Some(Arc::new(HashEmbedder::new(dim))),
                other => return Err(bad_arg(format!("unknown embedder '{other}' (\"hash\")"))),
            }
        }
        Some(f) => Some(Arc::new(PyEmbedder { model: model.into(), dim, func: f })),
    };
    let store = py
        .detach(|| -> basalt::Result<MemoryStore> {
            let s = MemoryStore::open(&db, name, cfg)?;
            match embedder {
                Some(e) => s.with_embedder(e),
                None => Ok(s),
            }
        })
        .py_err()?;
    Ok(NativeMemory { store })
}

fn mode(name: &str, keyword_weight: f32, vector_weight: f32) -> PyResult<RecallMode> {
    Ok(match name {
        "vector" => RecallMode::Vector,
        "keyword" => RecallMode::Keyword,
        "hybrid" => RecallMode::Hybrid { keyword_weight, vector_weight },
        other => return Err(bad_arg(format!("unknown mode '{other}' (vector, keyword, hybrid)"))),
    })
}

#[pymethods]
impl NativeMemory {
    /// Stores a new memory; returns its id (an exact duplicate returns the existing id).
    #[pyo3(signature = (namespace, text, metadata=None, vector=None, ttl=None))]
    fn remember(
        &self,
        py: Python<'_>,
        namespace: &str,
        text: &str,
        metadata: Option<&str>,
        vector: Option<Vec<f32>>,
        ttl: Option<f64>,
    ) -> PyResult<u64> {
        let m = new_memory(text, metadata, vector, ttl)?;
        py.detach(|| self.store.remember(namespace, m)).py_err()
    }

    /// Stores several memories in one write; per item its id or its exception.
    fn remember_many<'py>(
        &self,
        py: Python<'py>,
        namespace: &str,
        items: Vec<NewItem>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let ms = items
            .iter()
            .map(|(t, m, v, ttl)| new_memory(t, m.as_deref(), v.clone(), *ttl))
            .collect::<PyResult<Vec<_>>>()?;
        let out = py.detach(|| self.store.remember_many(namespace, ms)).py_err()?;
        out.into_iter()
            .map(|r| match r {
                Ok(id) => id.into_bound_py_any(py),
                Err(e) => Ok(crate::errors::to_py(e).into_value(py).into_bound(py).into_any()),
            })
            .collect()
    }

    /// Creates or replaces the memory at `key` in `namespace`; returns its id.
    #[pyo3(signature = (namespace, key, text, metadata=None, vector=None, ttl=None))]
    #[allow(clippy::too_many_arguments)]
    fn put(
        &self,
        py: Python<'_>,
        namespace: &str,
        key: &str,
        text: &str,
        metadata: Option<&str>,
        vector: Option<Vec<f32>>,
        ttl: Option<f64>,
    ) -> PyResult<u64> {
        let m = new_memory(text, metadata, vector, ttl)?;
        py.detach(|| self.store.put(namespace, key, m)).py_err()
    }

    /// The item with this id, or `None`.
    fn get<'py>(&self, py: Python<'py>, id: u64) -> PyResult<Option<Bound<'py, PyDict>>> {
        let it = py.detach(|| self.store.get(id)).py_err()?;
        it.map(|i| item(py, &i)).transpose()
    }

    /// The item at `key` in `namespace`, or `None`.
    fn get_key<'py>(
        &self,
        py: Python<'py>,
        namespace: &str,
        key: &str,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let it = py.detach(|| self.store.get_key(namespace, key)).py_err()?;
        it.map(|i| item(py, &i)).transpose()
    }

    /// Live items in `namespace` (and below), by ascending id, a page at a time.
    #[pyo3(signature = (namespace, filter=None, limit=100, after=None))]
    fn list<'py>(
        &self,
        py: Python<'py>,
        namespace: &str,
        filter: Option<&str>,
        limit: usize,
        after: Option<u64>,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let f = self::filter(filter)?;
        let items = py.detach(|| self.store.list(namespace, f.as_ref(), limit, after)).py_err()?;
        items.iter().map(|i| item(py, i)).collect()
    }

    /// Namespaces holding live items, with their counts.
    fn namespaces(&self, py: Python<'_>) -> PyResult<Vec<(String, u64)>> {
        py.detach(|| self.store.list_namespaces()).py_err()
    }

    /// The `k` best items for a query, filtered before ranking.
    #[pyo3(signature = (namespace, query, k=5, vector=None, filter=None, min_similarity=None, mode="hybrid", keyword_weight=1.0, vector_weight=1.0))]
    #[allow(clippy::too_many_arguments)]
    fn recall<'py>(
        &self,
        py: Python<'py>,
        namespace: &str,
        query: &str,
        k: usize,
        vector: Option<Vec<f32>>,
        filter: Option<&str>,
        min_similarity: Option<f32>,
        mode: &str,
        keyword_weight: f32,
        vector_weight: f32,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let mut r = Recall::new(namespace, query, k);
        r.vector = vector;
        r.filter = self::filter(filter)?;
        r.min_similarity = min_similarity;
        r.mode = self::mode(mode, keyword_weight, vector_weight)?;
        let hits = py.detach(|| self.store.recall(&r)).py_err()?;
        hits.iter()
            .map(|h| {
                let d = item(py, &h.item)?;
                d.set_item("score", h.score)?;
                d.set_item("vector_rank", h.vector)?;
                d.set_item("keyword_rank", h.keyword)?;
                Ok(d)
            })
            .collect()
    }

    /// Changes an item; with `expected_version`, only if it is still at that version.
    /// Returns the new version.
    #[pyo3(signature = (id, text=None, metadata=None, vector=None, archived=None, expected_version=None))]
    #[allow(clippy::too_many_arguments)]
    fn update(
        &self,
        py: Python<'_>,
        id: u64,
        text: Option<String>,
        metadata: Option<&str>,
        vector: Option<Vec<f32>>,
        archived: Option<bool>,
        expected_version: Option<u64>,
    ) -> PyResult<u64> {
        let change = MemoryUpdate {
            text,
            metadata: metadata.map(|m| json(Some(m))).transpose()?,
            vector,
            archived,
        };
        py.detach(|| self.store.update(id, change, expected_version)).py_err()
    }

    /// Deletes an item; false when there was none.
    fn forget(&self, py: Python<'_>, id: u64) -> PyResult<bool> {
        py.detach(|| self.store.forget(id)).py_err()
    }

    /// Deletes the item at `key`; false when there was none.
    fn forget_key(&self, py: Python<'_>, namespace: &str, key: &str) -> PyResult<bool> {
        py.detach(|| self.store.forget_key(namespace, key)).py_err()
    }

    /// Deletes the items of a namespace (and below) that pass `filter`; returns how many.
    #[pyo3(signature = (namespace, filter=None))]
    fn forget_namespace(
        &self,
        py: Python<'_>,
        namespace: &str,
        filter: Option<&str>,
    ) -> PyResult<u64> {
        let f = self::filter(filter)?;
        py.detach(|| self.store.forget_namespace(namespace, f.as_ref())).py_err()
    }

    /// An item's versions, oldest first.
    fn history<'py>(&self, py: Python<'py>, id: u64) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let entries = py.detach(|| self.store.history(id)).py_err()?;
        entries
            .iter()
            .map(|h| {
                let d = PyDict::new(py);
                d.set_item("version", h.version)?;
                d.set_item("op", &h.op)?;
                d.set_item("old_text", &h.old_text)?;
                d.set_item("new_text", &h.new_text)?;
                d.set_item("old_metadata", json_to_py(py, &h.old_metadata)?)?;
                d.set_item("new_metadata", json_to_py(py, &h.new_metadata)?)?;
                d.set_item("at_ms", h.at_ms)?;
                Ok(d)
            })
            .collect()
    }

    /// Deletes expired items; returns how many.
    fn sweep_expired(&self, py: Python<'_>) -> PyResult<u64> {
        py.detach(|| self.store.sweep_expired()).py_err()
    }

    /// Saves a checkpoint of the store.
    fn checkpoint(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        py.detach(|| self.store.checkpoint(name)).py_err()
    }

    /// Restores the store's tables to a checkpoint.
    fn restore(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        py.detach(|| self.store.restore(name)).py_err()
    }

    /// The store's checkpoints.
    fn checkpoints(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        py.detach(|| self.store.checkpoints()).py_err()
    }

    /// A durable named subscription to the store's changes.
    fn subscribe(&self, py: Python<'_>, name: &str) -> PyResult<NativeSubscription> {
        let sub = py.detach(|| self.store.subscribe(name)).py_err()?;
        Ok(NativeSubscription { sub })
    }

    /// Removes a subscription.
    fn unsubscribe(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        py.detach(|| self.store.unsubscribe(name)).py_err()
    }

    /// The store's name.
    #[getter]
    fn name(&self) -> String {
        self.store.name().to_string()
    }
}

/// A subscription's reader (the native half of `basalt.Subscription`).
#[pyclass(frozen, module = "basalt._basalt", name = "NativeSubscription")]
pub struct NativeSubscription {
    sub: Subscription,
}

fn event<'py>(py: Python<'py>, e: &MemoryEvent) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("lsn", e.lsn)?;
    d.set_item(
        "kind",
        match e.kind {
            MemoryEventKind::Remembered => "remembered",
            MemoryEventKind::Updated => "updated",
            MemoryEventKind::Forgotten => "forgotten",
        },
    )?;
    d.set_item("id", e.id)?;
    d.set_item("namespace", &e.namespace)?;
    d.set_item("key", &e.key)?;
    d.set_item("version", e.version)?;
    d.set_item("text", &e.text)?;
    Ok(d)
}

#[pymethods]
impl NativeSubscription {
    /// Events of up to `max_commits` commits after the last acknowledged position.
    #[pyo3(signature = (max_commits=100))]
    fn poll<'py>(&self, py: Python<'py>, max_commits: usize) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let events = py.detach(|| self.sub.poll(max_commits)).py_err()?;
        events.iter().map(|e| event(py, e)).collect()
    }

    /// Acknowledges every event up to `lsn`: they are not delivered again.
    fn ack(&self, py: Python<'_>, lsn: u64) -> PyResult<()> {
        py.detach(|| self.sub.ack(lsn)).py_err()
    }
}
