//! Model-based fuzzing: the input bytes are a sequence of operations (insert, delete,
//! update, delete-by-predicate, transaction commit/rollback, flush, compact, kill, reopen)
//! run against the store on an in-memory file system and against a `BTreeMap`; after every
//! step both must hold the same rows. Run: `cargo +nightly fuzz run model` from `fuzz/`.
#![no_main]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use basalt_storage::{CmpOp, Durability, MemFs, Predicate, Store, StoreOptions};
use libfuzzer_sys::fuzz_target;

fn open(fs: &MemFs) -> Store {
    let opts = StoreOptions { bulk_insert_rows: 64, memtable_flush_rows: 100, ..StoreOptions::default() };
    Store::open(Arc::new(fs.clone()), Path::new("/db"), Path::new("fuzz"), opts).expect("open")
}

fn batch(vals: &[i64]) -> RecordBatch {
    let s = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
    RecordBatch::try_new(s, vec![Arc::new(Int64Array::from(vals.to_vec()))]).expect("batch")
}

fn contents(s: &Store) -> BTreeMap<u64, i64> {
    let t = s.snapshot().table("m").expect("table").clone();
    let mut out = BTreeMap::new();
    for b in t.scan(&[0, 1]).expect("scan") {
        let b = b.expect("batch");
        let ids = b.column(0).as_any().downcast_ref::<UInt64Array>().expect("ids");
        let v = b.column(1).as_any().downcast_ref::<Int64Array>().expect("v");
        for i in 0..b.num_rows() {
            assert!(out.insert(ids.value(i), v.value(i)).is_none(), "duplicate id");
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let fs = MemFs::new();
    let mut s = open(&fs);
    s.create_table("m", &Schema::new(vec![Field::new("v", DataType::Int64, false)])).expect("create");
    let mut model: BTreeMap<u64, i64> = BTreeMap::new();
    let pick = |m: &BTreeMap<u64, i64>, b: u8| m.keys().nth(usize::from(b) % m.len().max(1)).copied();
    for chunk in data.chunks(3) {
        let (op, a, b) = (chunk[0] % 10, *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0));
        match op {
            0 | 1 => {
                let vals: Vec<i64> = (0..=i64::from(a % 8)).map(|k| i64::from(b) + k).collect();
                let r = s.insert("m", &[batch(&vals)]).expect("insert");
                for (k, v) in vals.iter().enumerate() {
                    model.insert(r.first + k as u64, *v);
                }
            }
            2 => {
                let vals: Vec<i64> = (0..100).map(i64::from).collect();
                let r = s.insert("m", &[batch(&vals)]).expect("bulk");
                for (k, v) in vals.iter().enumerate() {
                    model.insert(r.first + k as u64, *v);
                }
            }
            3 => {
                if let Some(id) = pick(&model, a) {
                    s.delete("m", &[id]).expect("delete");
                    model.remove(&id);
                }
            }
            4 => {
                if let Some(id) = pick(&model, a) {
                    s.update("m", &[id], &batch(&[i64::from(b)])).expect("update");
                    model.insert(id, i64::from(b));
                }
            }
            5 => {
                let p = Predicate::cmp("v", CmpOp::Lt, i64::from(a % 40));
                s.delete_where("m", &p, Durability::ProcessSafe).expect("delete where");
                model.retain(|_, v| *v >= i64::from(a % 40));
            }
            6 => {
                let mut t = s.begin(Durability::ProcessSafe).expect("begin");
                let r = t.insert(&s, "m", &[batch(&[i64::from(a)])]).expect("txn insert");
                if b % 2 == 0 {
                    s.commit(t).expect("commit");
                    model.insert(r.first, i64::from(a));
                } else {
                    s.rollback(t);
                }
            }
            7 => s.flush().expect("flush"),
            8 => {
                s.compact("m", true).expect("compact");
            }
            _ => {
                if a % 2 == 0 {
                    std::mem::forget(s);
                } else {
                    s.close().expect("close");
                    drop(s);
                }
                s = open(&fs);
            }
        }
        assert_eq!(contents(&s), model);
    }
});
