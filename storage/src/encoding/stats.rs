//! Zone maps: the per-chunk statistics (min, max, nulls) written with every chunk and the
//! values they hold.
//!
//! Part of the encodings (see the module doc of `encoding`).

use super::*;

/// A typed bound of a zone map.
#[derive(Debug, Clone, PartialEq)]
pub enum StatValue {
    /// Signed integers (and dates/timestamps).
    Int(i64),
    /// Unsigned integers and booleans (0/1).
    UInt(u64),
    /// Floats, ordered totally (−0 < +0, NaN above every number: Arrow's order).
    Float(f64),
    /// Byte strings (UTF-8 compares correctly as bytes). Only kept up to 64 bytes.
    Bytes(Vec<u8>),
    /// Unscaled 128-bit decimals (the column's scale applies). Segment format 5.
    Decimal(i128),
}

impl StatValue {
    fn write(&self, e: &mut Enc) {
        match self {
            StatValue::Int(v) => {
                e.u8(0);
                e.u64(*v as u64);
            }
            StatValue::UInt(v) => {
                e.u8(1);
                e.u64(*v);
            }
            StatValue::Float(v) => {
                e.u8(2);
                e.u64(v.to_bits());
            }
            StatValue::Bytes(b) => {
                e.u8(3);
                e.bytes(b);
            }
            StatValue::Decimal(v) => {
                e.u8(4);
                e.u64(*v as u64);
                e.u64((*v >> 64) as u64);
            }
        }
    }
    fn read(d: &mut Dec<'_>) -> Result<Self> {
        Ok(match d.u8("stat tag")? {
            0 => StatValue::Int(d.u64("stat")? as i64),
            1 => StatValue::UInt(d.u64("stat")?),
            2 => StatValue::Float(f64::from_bits(d.u64("stat")?)),
            3 => StatValue::Bytes(d.bytes("stat")?.to_vec()),
            4 => {
                let lo = d.u64("stat")?;
                let hi = d.u64("stat")?;
                StatValue::Decimal(i128::from(hi as i64) << 64 | i128::from(lo))
            }
            t => return Err(d.err(format!("unknown stat tag {t}"))),
        })
    }

    /// How two bounds of one column compare, in the order the zone maps keep (floats in
    /// total order); `None` for bounds of different kinds.
    pub fn compare(&self, other: &StatValue) -> Option<std::cmp::Ordering> {
        match (self, other) {
            (StatValue::Int(a), StatValue::Int(b)) => Some(a.cmp(b)),
            (StatValue::UInt(a), StatValue::UInt(b)) => Some(a.cmp(b)),
            (StatValue::Float(a), StatValue::Float(b)) => Some(a.total_cmp(b)),
            (StatValue::Bytes(a), StatValue::Bytes(b)) => Some(a.cmp(b)),
            (StatValue::Decimal(a), StatValue::Decimal(b)) => Some(a.cmp(b)),
            _ => None,
        }
    }
}

/// Min/max of the non-null values of a chunk.
#[derive(Debug, Clone, PartialEq)]
pub struct ZoneMap {
    /// Smallest non-null value.
    pub min: StatValue,
    /// Largest non-null value.
    pub max: StatValue,
}

impl ZoneMap {
    /// Serialises an optional zone map.
    pub fn write_opt(z: &Option<ZoneMap>, e: &mut Enc) {
        match z {
            None => e.u8(0),
            Some(z) => {
                e.u8(1);
                z.min.write(e);
                z.max.write(e);
            }
        }
    }
    /// Reads what [`ZoneMap::write_opt`] wrote.
    pub fn read_opt(d: &mut Dec<'_>) -> Result<Option<ZoneMap>> {
        Ok(match d.bool("zone map flag")? {
            false => None,
            true => Some(ZoneMap { min: StatValue::read(d)?, max: StatValue::read(d)? }),
        })
    }
}

pub(super) fn float_stats(
    vals: impl Iterator<Item = f64>,
    is_valid: &dyn Fn(usize) -> bool,
) -> Option<ZoneMap> {
    // Min and max in IEEE 754's total order, the order Arrow's comparison kernels use:
    // −0 below +0, a NaN above every number (below, with its sign bit set). Ordered any
    // other way (NaN left out, −0 = +0), `x > 5` over a chunk holding a NaN would be ruled
    // out by its zone map although the NaN row matches.
    let mut range: Option<(f64, f64)> = None;
    for (i, v) in vals.enumerate() {
        if is_valid(i) {
            range = Some(match range {
                None => (v, v),
                Some((lo, hi)) => (
                    if v.total_cmp(&lo).is_lt() { v } else { lo },
                    if v.total_cmp(&hi).is_gt() { v } else { hi },
                ),
            });
        }
    }
    range.map(|(lo, hi)| ZoneMap { min: StatValue::Float(lo), max: StatValue::Float(hi) })
}
