//! Dictionary codes of a scanned column as the fused group-by, the per-entry filter and
//! the dictionary join read them: the codes as `u32`s, and the dictionary's values.
//!
//! What this module must not do: depend on any other module of this crate.

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, UInt8Type, UInt16Type, UInt32Type, UInt64Type};
use datafusion::common::{DataFusionError, Result};

/// The values of a dictionary array.
pub(crate) fn dictionary_values(col: &ArrayRef) -> Result<ArrayRef> {
    Ok(match col.data_type() {
        DataType::Dictionary(k, _) => match k.as_ref() {
            DataType::UInt8 => col.as_dictionary::<UInt8Type>().values().clone(),
            DataType::UInt16 => col.as_dictionary::<UInt16Type>().values().clone(),
            DataType::UInt32 => col.as_dictionary::<UInt32Type>().values().clone(),
            DataType::UInt64 => col.as_dictionary::<UInt64Type>().values().clone(),
            t => return Err(DataFusionError::Internal(format!("dictionary keys of type {t}"))),
        },
        t => return Err(DataFusionError::Internal(format!("not a dictionary: {t}"))),
    })
}

/// The codes of a dictionary array (NULL rows give whatever code they hold).
pub(crate) fn codes_of(col: &ArrayRef) -> Result<Vec<u32>> {
    let DataType::Dictionary(kt, _) = col.data_type() else {
        return Err(DataFusionError::Internal(format!("not a dictionary: {}", col.data_type())));
    };
    Ok(match kt.as_ref() {
        DataType::UInt8 => {
            col.as_dictionary::<UInt8Type>().keys().values().iter().map(|&c| u32::from(c)).collect()
        }
        DataType::UInt16 => col
            .as_dictionary::<UInt16Type>()
            .keys()
            .values()
            .iter()
            .map(|&c| u32::from(c))
            .collect(),
        DataType::UInt32 => col.as_dictionary::<UInt32Type>().keys().values().to_vec(),
        t => return Err(DataFusionError::Internal(format!("dictionary keys of type {t}"))),
    })
}
