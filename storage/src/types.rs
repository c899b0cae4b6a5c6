//! Column types and table schemas.
//!
//! Basalt stores Arrow types. Each type maps to a [`Physical`] kind that decides which
//! encodings apply; types with no specialised encoding (nested lists and structs, maps,
//! decimal256, float16, ...) are stored through the generic Arrow-IPC encoding, so every
//! type listed in DESIGN.md round-trips exactly. `VECTOR(D)` is
//! `FixedSizeList<Float32, D>` and is stored uncompressed and 64-byte aligned.
//!
//! Every table has a hidden-by-default `_id` column (`UInt64`, not null) with column id 0.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, FieldRef, Schema, SchemaRef};
use basalt_vector::StoredForm;

use crate::error::{Error, Result};

/// Name of the row-id column present in every table.
pub const ID_COLUMN: &str = "_id";
/// Column id of `_id`.
pub const ID_COLUMN_ID: u32 = 0;
/// Longest accepted table or column name, in bytes.
pub const MAX_NAME_LEN: usize = 255;

/// How a column's values are laid out physically; decides the candidate encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Physical {
    /// Booleans (bit-packed).
    Bool,
    /// Fixed-width integers of `width` bytes (also dates, times, timestamps, durations).
    Int {
        /// Width in bytes: 1, 2, 4 or 8.
        width: u8,
        /// Whether values compare as signed.
        signed: bool,
    },
    /// 32-bit floats.
    F32,
    /// 64-bit floats.
    F64,
    /// Variable-length bytes with i32 offsets (`Utf8`, `Binary`).
    Bytes,
    /// 16-byte decimals, stored plain.
    Decimal128,
    /// `VECTOR(D)`: `FixedSizeList<Float32, D>` with non-null components.
    Vector {
        /// Dimension.
        dim: usize,
        /// How the components are stored (the field's [`VECTOR_FORM_KEY`] metadata).
        form: StoredForm,
    },
    /// Anything else Arrow can represent: stored as an Arrow IPC stream.
    Generic,
}

/// Field metadata key naming the stored form of a `VECTOR(D)` column: `float32` (the
/// default when absent), `float16` or `int8` ([`StoredForm`]). Values written to a
/// `float16` or `int8` column are rounded to what that form holds when they are inserted
/// (see `basalt_vector::stored`); reads return those values as `float32`.
pub const VECTOR_FORM_KEY: &str = "basalt.vector.storage";

/// A `VECTOR(D)` field stored in `form`.
pub fn vector_field(name: &str, dim: usize, form: StoredForm, nullable: bool) -> Field {
    let f = Field::new(name, vector_type(dim), nullable);
    match form {
        StoredForm::Float32 => f,
        other => f.with_metadata(HashMap::from([(
            VECTOR_FORM_KEY.to_string(),
            other.name().to_string(),
        )])),
    }
}

/// The stored form a field declares (`Float32` when it declares none).
pub fn stored_form(f: &Field) -> Result<StoredForm> {
    let Some(name) = f.metadata().get(VECTOR_FORM_KEY) else { return Ok(StoredForm::Float32) };
    let bad = |reason: &'static str| Error::UnsupportedType {
        column: f.name().clone(),
        data_type: f.data_type().clone(),
        reason,
    };
    if !matches!(f.data_type(), DataType::FixedSizeList(c, _) if c.data_type() == &DataType::Float32)
    {
        return Err(bad("only VECTOR columns have a stored form"));
    }
    StoredForm::parse(name).ok_or_else(|| bad("a vector's stored form is float32, float16 or int8"))
}

/// [`physical`] of a field, with the stored form of a vector column.
pub fn physical_of(f: &Field) -> Result<Physical> {
    Ok(match physical(f.name(), f.data_type())? {
        Physical::Vector { dim, .. } => Physical::Vector { dim, form: stored_form(f)? },
        other => other,
    })
}

/// The canonical `VECTOR(D)` type: `FixedSizeList<Float32, D>` with a nullable `item` child.
pub fn vector_type(dim: usize) -> DataType {
    DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), dim as i32)
}

/// Classifies a type, or refuses it with a reason.
pub fn physical(column: &str, dt: &DataType) -> Result<Physical> {
    use DataType as D;
    let unsupported = |reason: &'static str| Error::UnsupportedType {
        column: column.to_string(),
        data_type: dt.clone(),
        reason,
    };
    Ok(match dt {
        D::Boolean => Physical::Bool,
        D::Int8 => Physical::Int { width: 1, signed: true },
        D::Int16 => Physical::Int { width: 2, signed: true },
        D::Int32 | D::Date32 | D::Time32(_) => Physical::Int { width: 4, signed: true },
        D::Int64 | D::Date64 | D::Time64(_) | D::Timestamp(_, _) | D::Duration(_) => {
            Physical::Int { width: 8, signed: true }
        }
        D::UInt8 => Physical::Int { width: 1, signed: false },
        D::UInt16 => Physical::Int { width: 2, signed: false },
        D::UInt32 => Physical::Int { width: 4, signed: false },
        D::UInt64 => Physical::Int { width: 8, signed: false },
        D::Float32 => Physical::F32,
        D::Float64 => Physical::F64,
        D::Utf8 | D::Binary => Physical::Bytes,
        D::Decimal128(_, _) => Physical::Decimal128,
        D::FixedSizeList(f, n) if f.data_type() == &D::Float32 => {
            if *n <= 0 {
                return Err(unsupported("vector dimension must be at least 1"));
            }
            Physical::Vector { dim: *n as usize, form: StoredForm::Float32 }
        }
        D::Float16
        | D::LargeUtf8
        | D::LargeBinary
        | D::FixedSizeBinary(_)
        | D::Decimal256(_, _)
        | D::Interval(_)
        | D::List(_)
        | D::LargeList(_)
        | D::FixedSizeList(_, _)
        | D::Struct(_)
        | D::Map(_, _) => Physical::Generic,
        D::Dictionary(_, _) => {
            return Err(unsupported(
                "declare the value type; Basalt chooses dictionary encoding by itself",
            ));
        }
        D::Null => return Err(unsupported("a column needs a value type")),
        _ => return Err(unsupported("no storage encoding for this type")),
    })
}

/// Checks a table or column name.
pub fn check_name(name: &str) -> Result<()> {
    let bad = |reason| Err(Error::InvalidName { name: name.to_string(), reason });
    if name.is_empty() {
        return bad("names must not be empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad("names are limited to 255 bytes");
    }
    if name.chars().any(|c| c == '\0' || c.is_control()) {
        return bad("names must not contain control characters");
    }
    Ok(())
}

/// One user column: a stable id (never reused, survives renames) and its Arrow field.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnDef {
    /// Stable column id; segments refer to columns by id.
    pub id: u32,
    /// Name, type and nullability.
    pub field: FieldRef,
}

/// A table's schema: the user columns in order, plus the implicit `_id`.
#[derive(Debug, Clone)]
pub struct TableSchema {
    columns: Vec<ColumnDef>,
    next_column_id: u32,
    /// `_id` followed by the user columns.
    full: SchemaRef,
    /// Projections of `full` built so far, by column positions: a prepared point lookup
    /// asks for the same one on every call. Shared by clones (a schema never changes; a
    /// changed one is a new value with its own cache).
    projections: Arc<parking_lot::Mutex<HashMap<Vec<usize>, SchemaRef>>>,
    /// The user columns as [`encode_columns`] writes them, built on first use and shared
    /// by clones: every manifest install writes every table's columns, and encoding an
    /// Arrow schema (an IPC flatbuffer) per table per install was a tenth of a DDL.
    encoded: Arc<std::sync::OnceLock<Vec<u8>>>,
}

/// How many projections a schema keeps before it starts over.
const KEPT_PROJECTIONS: usize = 64;

impl PartialEq for TableSchema {
    fn eq(&self, other: &Self) -> bool {
        self.columns == other.columns
            && self.next_column_id == other.next_column_id
            && self.full == other.full
    }
}

impl TableSchema {
    /// Builds a schema from user fields, validating names and types and assigning ids 1..
    pub fn from_user_schema(schema: &Schema) -> Result<Self> {
        let mut columns = Vec::with_capacity(schema.fields().len());
        for (i, f) in schema.fields().iter().enumerate() {
            columns.push(ColumnDef { id: i as u32 + 1, field: canonical_field(f)? });
        }
        let next = columns.len() as u32 + 1;
        Self::from_parts(columns, next)
    }

    /// Rebuilds a schema from stored parts (the manifest), validating it.
    pub fn from_parts(columns: Vec<ColumnDef>, next_column_id: u32) -> Result<Self> {
        let mut seen = std::collections::HashSet::new();
        for c in &columns {
            check_name(c.field.name())?;
            if c.field.name() == ID_COLUMN {
                return Err(Error::InvalidName {
                    name: ID_COLUMN.into(),
                    reason: "_id is reserved for the row id Basalt assigns",
                });
            }
            if !seen.insert(c.field.name().clone()) {
                return Err(Error::InvalidName {
                    name: c.field.name().clone(),
                    reason: "duplicate column name",
                });
            }
            if c.id == ID_COLUMN_ID || c.id >= next_column_id {
                return Err(Error::InvalidName {
                    name: c.field.name().clone(),
                    reason: "column id out of range",
                });
            }
            physical_of(&c.field)?;
        }
        let mut fields: Vec<FieldRef> = Vec::with_capacity(columns.len() + 1);
        fields.push(Arc::new(Field::new(ID_COLUMN, DataType::UInt64, false)));
        fields.extend(columns.iter().map(|c| c.field.clone()));
        Ok(Self {
            columns,
            next_column_id,
            full: Arc::new(Schema::new(fields)),
            projections: Default::default(),
            encoded: Default::default(),
        })
    }

    /// The user columns (ids and Arrow fields) encoded by [`encode_columns`], kept.
    pub fn encoded_columns(&self) -> &[u8] {
        self.encoded.get_or_init(|| {
            let mut e = crate::codec::Enc::new();
            let ids: Vec<u32> = self.columns.iter().map(|c| c.id).collect();
            encode_columns(&mut e, &ids, &self.user_schema());
            e.finish()
        })
    }

    /// The full schema projected to these positions (`_id` is 0), built once per
    /// projection and kept; an error for a position out of range.
    pub fn project(&self, projection: &[usize]) -> Result<SchemaRef> {
        let n = self.full.fields().len();
        if projection.len() == n && projection.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(self.full.clone());
        }
        if let Some(s) = self.projections.lock().get(projection) {
            return Ok(s.clone());
        }
        let s = Arc::new(self.full.project(projection).map_err(|e| Error::arrow("project", e))?);
        let mut kept = self.projections.lock();
        if kept.len() >= KEPT_PROJECTIONS {
            kept.clear();
        }
        kept.insert(projection.to_vec(), s.clone());
        Ok(s)
    }

    /// A copy with a new column at the end (it gets the next column id).
    pub fn with_added(&self, field: &Field) -> Result<TableSchema> {
        let mut columns = self.columns.clone();
        columns.push(ColumnDef { id: self.next_column_id, field: canonical_field(field)? });
        Self::from_parts(columns, self.next_column_id + 1)
    }

    /// A copy without the named column (its id is never reused).
    pub fn with_dropped(&self, table: &str, name: &str) -> Result<TableSchema> {
        let pos = self.columns.iter().position(|c| c.field.name() == name).ok_or_else(|| {
            Error::ColumnNotFound { table: table.to_string(), column: name.to_string() }
        })?;
        let mut columns = self.columns.clone();
        columns.remove(pos);
        Self::from_parts(columns, self.next_column_id)
    }

    /// A copy with a column renamed (same id, type and data).
    pub fn with_renamed(&self, table: &str, from: &str, to: &str) -> Result<TableSchema> {
        let mut columns = self.columns.clone();
        let c = columns.iter_mut().find(|c| c.field.name() == from).ok_or_else(|| {
            Error::ColumnNotFound { table: table.to_string(), column: from.to_string() }
        })?;
        c.field = Arc::new(c.field.as_ref().clone().with_name(to));
        Self::from_parts(columns, self.next_column_id)
    }

    /// The user columns in order.
    pub fn columns(&self) -> &[ColumnDef] {
        &self.columns
    }

    /// Next column id to hand out.
    pub fn next_column_id(&self) -> u32 {
        self.next_column_id
    }

    /// `_id` followed by the user columns.
    pub fn full_schema(&self) -> &SchemaRef {
        &self.full
    }

    /// The user columns only (what `SELECT *` shows).
    pub fn user_schema(&self) -> SchemaRef {
        Arc::new(Schema::new(self.columns.iter().map(|c| c.field.clone()).collect::<Vec<_>>()))
    }

    /// Position of a column in [`TableSchema::full_schema`] (`_id` is 0).
    pub fn index_of(&self, name: &str) -> Option<usize> {
        if name == ID_COLUMN {
            return Some(0);
        }
        self.columns.iter().position(|c| c.field.name() == name).map(|i| i + 1)
    }

    /// Column id at a position of the full schema.
    pub fn column_id_at(&self, full_index: usize) -> u32 {
        if full_index == 0 { ID_COLUMN_ID } else { self.columns[full_index - 1].id }
    }

    /// Position in [`TableSchema::full_schema`] of the user column with id `id`.
    pub fn position_of_id(&self, id: u32) -> Option<usize> {
        self.columns.iter().position(|c| c.id == id).map(|i| i + 1)
    }
}

/// Normalises a user field: vector children become the canonical `item: Float32`.
pub fn canonical_field(f: &Field) -> Result<FieldRef> {
    let dt = match f.data_type() {
        DataType::FixedSizeList(child, n) if child.data_type() == &DataType::Float32 => {
            vector_type(*n as usize)
        }
        other => other.clone(),
    };
    let field = Field::new(f.name(), dt, f.is_nullable()).with_metadata(f.metadata().clone());
    physical_of(&field)?;
    check_name(f.name())?;
    Ok(Arc::new(field))
}

/// Serialises an Arrow schema as an IPC `Schema` flatbuffer.
pub fn schema_to_bytes(schema: &Schema) -> Vec<u8> {
    arrow_ipc::convert::IpcSchemaEncoder::new().schema_to_fb(schema).finished_data().to_vec()
}

/// Reads what [`schema_to_bytes`] wrote; the flatbuffer is verified before use.
pub fn schema_from_bytes(bytes: &[u8]) -> std::result::Result<Schema, arrow_schema::ArrowError> {
    arrow_ipc::root_as_schema(bytes)
        .map(arrow_ipc::convert::fb_to_schema)
        .map_err(|e| arrow_schema::ArrowError::ParseError(format!("schema flatbuffer: {e}")))
}

/// Writes a column list: count (u32), the column ids (u32 each), then the Arrow schema of
/// those columns as a length-prefixed IPC flatbuffer. Used by segment footers and the
/// manifest.
pub fn encode_columns(e: &mut crate::codec::Enc, ids: &[u32], schema: &Schema) {
    e.u32(ids.len() as u32);
    for &c in ids {
        e.u32(c);
    }
    e.bytes(&schema_to_bytes(schema));
}

/// Reads what [`encode_columns`] wrote, checking that ids and fields correspond.
pub fn decode_columns(d: &mut crate::codec::Dec<'_>) -> Result<(Vec<u32>, Schema)> {
    let n = d.count(4, "column count")?;
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        ids.push(d.u32("column id")?);
    }
    let fb = d.bytes("schema")?;
    let schema =
        schema_from_bytes(fb).map_err(|e| d.err(format!("schema does not decode: {e}")))?;
    if schema.fields().len() != n {
        return Err(d.err("schema and column-id counts differ"));
    }
    Ok((ids, schema))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_validation() {
        let s = Schema::new(vec![
            Field::new("a", DataType::Int32, false),
            Field::new(
                "v",
                DataType::FixedSizeList(Arc::new(Field::new("x", DataType::Float32, false)), 4),
                true,
            ),
        ]);
        let t = TableSchema::from_user_schema(&s).unwrap();
        assert_eq!(t.full_schema().field(0).name(), ID_COLUMN);
        assert_eq!(t.full_schema().field(2).data_type(), &vector_type(4));
        assert_eq!(t.index_of("v"), Some(2));
        assert_eq!(t.column_id_at(2), 2);

        let dup = Schema::new(vec![
            Field::new("a", DataType::Int32, false),
            Field::new("a", DataType::Utf8, true),
        ]);
        assert!(matches!(TableSchema::from_user_schema(&dup), Err(Error::InvalidName { .. })));
        let id = Schema::new(vec![Field::new("_id", DataType::UInt64, false)]);
        assert!(TableSchema::from_user_schema(&id).is_err());
        let dict = Schema::new(vec![Field::new(
            "d",
            DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Utf8)),
            true,
        )]);
        assert!(matches!(TableSchema::from_user_schema(&dict), Err(Error::UnsupportedType { .. })));
        assert!(check_name("").is_err());
        assert!(check_name(&"x".repeat(256)).is_err());
    }

    /// The kept encoding decodes to the schema it belongs to, through every change: a
    /// changed schema (a clone of the old one's parts) never reuses the old encoding.
    #[test]
    fn kept_column_encodings_follow_schema_changes() {
        let decoded = |t: &TableSchema| {
            let bytes = t.encoded_columns().to_vec();
            let mut d = crate::codec::Dec::new(&bytes, std::path::Path::new("M"), 0);
            let got = decode_columns(&mut d).unwrap();
            d.finish("columns").unwrap();
            got
        };
        let expected = |t: &TableSchema| {
            let ids: Vec<u32> = t.columns().iter().map(|c| c.id).collect();
            (ids, t.user_schema().as_ref().clone())
        };
        let s = Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Utf8, true),
        ]);
        let t = TableSchema::from_user_schema(&s).unwrap();
        assert_eq!(decoded(&t), expected(&t));
        let kept = t.clone();
        let added = t.with_added(&Field::new("c", DataType::Float64, true)).unwrap();
        assert_eq!(decoded(&added), expected(&added));
        assert_eq!(decoded(&added).0, vec![1, 2, 3]);
        let dropped = added.with_dropped("t", "a").unwrap();
        assert_eq!(decoded(&dropped), expected(&dropped));
        assert_eq!(decoded(&dropped).0, vec![2, 3]);
        // The original (and its clones) keep their own encoding.
        assert_eq!(decoded(&kept), expected(&t));
        assert_eq!(decoded(&kept).0, vec![1, 2]);
    }
}
