use std::sync::Arc;

use arrow_array::builder::{Int32Builder, ListBuilder};
use arrow_array::cast::AsArray;
use arrow_array::*;
use arrow_schema::{Fields, TimeUnit};
use proptest::prelude::*;

use super::*;
use crate::types::{physical, vector_type};

/// The uncompressed block of an encoded chunk of `a` (64-byte aligned, as a segment
/// hands it out) and its decoding info.
fn block_of<'a>(enc: &'a EncodedChunk, a: &'a ArrayRef, phys: Physical) -> (Buffer, ChunkInfo<'a>) {
    let raw: Buffer = if enc.compressed {
        crate::frames::restore_all(&enc.stored, &enc.sections, enc.raw.len(), true).unwrap()
    } else {
        let mut m = MutableBuffer::new(enc.raw.len());
        m.extend_from_slice(&enc.raw);
        m.into()
    };
    let info = ChunkInfo {
        encoding: &enc.encoding,
        null_count: enc.null_count,
        sections: &enc.sections,
        rows: a.len(),
        data_type: a.data_type(),
        phys,
        file: Path::new("t"),
        offset: 0,
    };
    (raw, info)
}

/// Encodes with both policies, decodes both ways, checks equality; returns encodings seen.
fn round_trip(array: &ArrayRef) -> Vec<Encoding> {
    round_trip_as(array, physical("c", array.data_type()).unwrap())
}

fn round_trip_as(array: &ArrayRef, phys: Physical) -> Vec<Encoding> {
    let mut seen = Vec::new();
    for policy in [CompressionPolicy::Never, CompressionPolicy::Auto { level: 1 }] {
        for sliced in [false, true] {
            let a = if sliced && array.len() > 2 {
                array.slice(1, array.len() - 2)
            } else {
                array.clone()
            };
            let enc = encode(a.as_ref(), phys, policy).unwrap();
            let (raw, info) = block_of(&enc, &a, phys);
            let got = decode(&raw, info, DecodeMode::Values).unwrap();
            assert_eq!(got.as_ref(), a.as_ref(), "encoding {:?}", enc.encoding);
            // Windows decode exactly the rows they cover.
            let n = a.len();
            for (start, len) in [
                (0, 0),
                (0, n.min(1)),
                (n / 3, n - n / 3),
                (n.saturating_sub(1), n.min(1)),
                (n / 2, n.min(5).min(n - n / 2)),
                (n / 4, n.min(SMALL_WINDOW).min(n - n / 4)),
                (n / 5, n.min(SMALL_WINDOW + 1).min(n - n / 5)),
            ] {
                let w = decode_window(&raw, info, DecodeMode::Values, start, len).unwrap();
                assert_eq!(
                    w.as_ref(),
                    a.slice(start, len).as_ref(),
                    "window {start}+{len} of {:?}",
                    enc.encoding
                );
                check_window_bytes(&raw, info, &a, start, len);
            }
            assert!(decode_window(&raw, info, DecodeMode::Values, n, 1).is_err());
            // Row lists gather exactly those rows.
            let picks: [Vec<usize>; 6] = [
                Vec::new(),
                (0..n).collect(),
                (0..n).step_by(3).collect(),
                (0..n).filter(|i| i % 7 == 2 || i % 11 == 5).collect(),
                [0, n.saturating_sub(1)].into_iter().filter(|_| n > 1).collect(),
                vec![n / 2; n.min(2)],
            ];
            for rows in picks {
                let got = decode_rows(&raw, info, &rows).unwrap();
                let idx = UInt32Array::from_iter_values(rows.iter().map(|&r| r as u32));
                let want = arrow_select::take::take(a.as_ref(), &idx, None).unwrap();
                assert_eq!(got.as_ref(), want.as_ref(), "rows {rows:?} of {:?}", enc.encoding);
            }
            assert!(decode_rows(&raw, info, &[n]).is_err());
            assert!(n < 2 || decode_rows(&raw, info, &[1, 0]).is_err());
            // Single values read in place equal the array's.
            let in_place = reads_cells(a.data_type())
                && !matches!(enc.encoding, Encoding::DeltaPacked { bits, .. } if bits > 0);
            for r in 0..n {
                let got = decode_cell(raw.as_slice(), info, r).unwrap();
                match got {
                    Some(cell) => assert!(
                        same_cell(cell, cell_of(a.as_ref(), r)),
                        "row {r} of {:?}: {cell:?} vs {:?}",
                        enc.encoding,
                        cell_of(a.as_ref(), r)
                    ),
                    None => {
                        assert!(!in_place, "row {r} of {:?} not read in place", enc.encoding)
                    }
                }
            }
            assert!(!in_place || decode_cell(raw.as_slice(), info, n).is_err());
            let codes = decode(&raw, info, DecodeMode::Codes).unwrap();
            if let DataType::Dictionary(_, _) = codes.data_type() {
                let back = arrow_cast::cast(&codes, a.data_type()).unwrap();
                assert_eq!(back.as_ref(), a.as_ref());
                // Sorted dictionary: values strictly ascending.
                let d = codes.as_any_dictionary().values().clone();
                let sorted = arrow_ord::sort::sort(&d, None).unwrap();
                assert_eq!(sorted.as_ref(), d.as_ref());
            }
            seen.push(enc.encoding.clone());
        }
    }
    seen
}

/// The block with only the bytes [`window_bytes`] names for rows `start..start + len`
/// in place, every other byte garbage.
fn holey(raw: &Buffer, info: ChunkInfo<'_>, start: usize, len: usize) -> Option<Buffer> {
    let WindowBytes::Ranges { ranges, strings } = window_bytes(&info, start, len) else {
        return None;
    };
    let mut out = MutableBuffer::from_len_zeroed(raw.len());
    out.as_slice_mut().fill(0xA5);
    let copy = |out: &mut MutableBuffer, r: std::ops::Range<usize>| {
        out.as_slice_mut()[r.clone()].copy_from_slice(&raw.as_slice()[r]);
    };
    for r in ranges {
        copy(&mut out, r);
    }
    if let Some(s) = strings {
        let r = s.data(out.as_slice()).expect("the window's offsets are in place");
        copy(&mut out, r);
    }
    Some(out.into())
}

/// Decoding rows `start..start + len` — as a window (values and codes), as row lists
/// and as single cells — from only the bytes [`window_bytes`] names gives what the whole
/// block gives; only encodings read whole may ask for the whole block.
fn check_window_bytes(raw: &Buffer, info: ChunkInfo<'_>, a: &ArrayRef, start: usize, len: usize) {
    let Some(h) = holey(raw, info, start, len) else {
        assert!(
            matches!(
                (info.encoding, info.phys),
                (Encoding::Ipc | Encoding::HalfVector | Encoding::Int8Vector, _)
                    | (Encoding::Plain, Physical::Bool | Physical::Vector { .. })
            ),
            "{:?} asks for the whole block",
            info.encoding
        );
        return;
    };
    let what = format!("window {start}+{len} of {:?} from its bytes only", info.encoding);
    let w = decode_window(&h, info, DecodeMode::Values, start, len).unwrap();
    assert_eq!(w.as_ref(), a.slice(start, len).as_ref(), "{what}");
    let codes = decode_window(&h, info, DecodeMode::Codes, start, len).unwrap();
    let want = decode_window(raw, info, DecodeMode::Codes, start, len).unwrap();
    assert_eq!(codes.as_ref(), want.as_ref(), "{what} (codes)");
    let rows: Vec<usize> = (start..start + len).filter(|r| r % 3 != 1).collect();
    let got = decode_rows(&h, info, &rows).unwrap();
    let idx = UInt32Array::from_iter_values(rows.iter().map(|&r| r as u32));
    let want = arrow_select::take::take(a.as_ref(), &idx, None).unwrap();
    assert_eq!(got.as_ref(), want.as_ref(), "{what} (rows)");
    for r in start..start + len {
        let (got, want) = (
            decode_cell(h.as_slice(), info, r).unwrap(),
            decode_cell(raw.as_slice(), info, r).unwrap(),
        );
        match (got, want) {
            (Some(g), Some(w)) => assert!(same_cell(g, w), "{what}: row {r}"),
            (g, w) => assert_eq!(g.is_some(), w.is_some(), "{what}: row {r}"),
        }
    }
}

/// Row `i` of the decoded array `a` as a cell ([`cell_at`]), what [`decode_cell`] reading
/// the encoded block in place must agree with.
fn cell_of(a: &dyn Array, i: usize) -> Cell<'_> {
    cell_at(a, i).unwrap_or_else(|| panic!("no cell for {}", a.data_type()))
}

/// Cells equal, floats by bit pattern (NaN, -0.0).
fn same_cell(x: Cell<'_>, y: Cell<'_>) -> bool {
    match (x, y) {
        (Cell::F32(a), Cell::F32(b)) => a.to_bits() == b.to_bits(),
        (Cell::F64(a), Cell::F64(b)) => a.to_bits() == b.to_bits(),
        _ => x == y,
    }
}

fn opt_vec<T: std::fmt::Debug + Clone>(
    s: impl Strategy<Value = T>,
) -> impl Strategy<Value = Vec<Option<T>>> {
    proptest::collection::vec(proptest::option::weighted(0.85, s), 0..1500)
}

fn ints(mode: u8) -> BoxedStrategy<Vec<Option<i64>>> {
    match mode {
        0 => opt_vec(any::<i64>()).boxed(),
        1 => opt_vec(-3i64..4).boxed(),
        _ => {
            (any::<i32>(), 0i64..3, 0usize..1500)
                .prop_map(|(start, step, n)| {
                    (0..n)
                        .map(|i| {
                            if i % 17 == 5 {
                                None
                            } else {
                                Some(i64::from(start) + step * i as i64)
                            }
                        })
                        .collect()
                })
                .boxed()
        }
    }
}

/// `int_range_window` on one encoded chunk against the decoded values compared plainly
/// (`None` only where the chunk is not packed or has NULLs).
fn check_int_range(a: &ArrayRef, values: &[Option<i128>], start: usize, lo: i128, hi: i128) {
    let phys = physical("c", a.data_type()).unwrap();
    let enc = encode(a.as_ref(), phys, CompressionPolicy::Never).unwrap();
    let (raw, info) = block_of(&enc, a, phys);
    let start = start % a.len();
    let len = ((a.len() - start) / 2 + 1).min(a.len() - start);
    let got = int_range_window(&raw, info, start, len, lo, hi).unwrap();
    let packed = matches!(enc.encoding, Encoding::ForPacked { .. });
    match got {
        None => assert!(!packed || enc.null_count > 0, "{:?} refused", enc.encoding),
        Some(t) => {
            assert!(packed && enc.null_count == 0);
            let want: Vec<bool> = values[start..start + len]
                .iter()
                .map(|v| v.is_some_and(|v| lo <= v && v <= hi))
                .collect();
            assert_eq!(t.iter().collect::<Vec<_>>(), want, "{:?} [{lo}, {hi}]", enc.encoding);
        }
    }
    assert!(
        int_range_window(&raw, info, a.len(), 1, lo, hi).is_err() || !packed || enc.null_count > 0
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Ranges over packed integers, signed and unsigned, every width, windows anywhere.
    #[test]
    fn int_ranges_on_packed_values(
        v in prop::collection::vec(prop_oneof![
            8 => (-300i64..300).prop_map(Some),
            1 => any::<i64>().prop_map(Some),
            1 => Just(None),
        ], 1..300),
        start in 0usize..300,
        ends in (any::<prop::sample::Index>(), any::<prop::sample::Index>()),
        extreme in prop_oneof![
            6 => Just(None),
            1 => Just(Some((i128::MIN, 0i128))),
            1 => Just(Some((-5, i128::MAX))),
            1 => any::<(i64, i64)>().prop_map(|(a, b)| Some((i128::from(a), i128::from(b)))),
        ],
        dense in any::<bool>(),
        big in any::<bool>(),
    ) {
        // Mostly without NULLs and large values, so most chunks take the packed path.
        let v: Vec<Option<i64>> =
            if dense { v.iter().map(|x| Some(x.unwrap_or(7))).collect() } else { v };
        let v: Vec<Option<i64>> =
            if big { v } else { v.iter().map(|x| x.map(|x| x % 300)).collect() };
        let wide: Vec<Option<i128>> = v.iter().map(|x| x.map(i128::from)).collect();
        // Range ends taken from the values themselves (so both edges are hit), or extreme.
        let at = |i: &prop::sample::Index| wide[i.index(wide.len())].unwrap_or(0);
        let (lo, hi) = extreme.unwrap_or((at(&ends.0), at(&ends.1)));
        let (lo, hi) = if extreme.is_none() && lo > hi { (hi, lo) } else { (lo, hi) };
        check_int_range(&(Arc::new(Int64Array::from(v.clone())) as ArrayRef), &wide, start, lo, hi);
        let small: Vec<Option<i16>> = v.iter().map(|x| x.map(|x| (x % 300) as i16)).collect();
        let wide16: Vec<Option<i128>> = small.iter().map(|x| x.map(i128::from)).collect();
        check_int_range(&(Arc::new(Int16Array::from(small)) as ArrayRef), &wide16, start, lo, hi);
        let unsigned: Vec<Option<u64>> = v.iter().map(|x| x.map(|x| x as u64)).collect();
        let wideu: Vec<Option<i128>> = unsigned.iter().map(|x| x.map(i128::from)).collect();
        check_int_range(&(Arc::new(UInt64Array::from(unsigned)) as ArrayRef), &wideu, start, lo, hi);
        let dec = Decimal128Array::from(wide.clone()).with_precision_and_scale(18, 3).unwrap();
        check_int_range(&(Arc::new(dec) as ArrayRef), &wide, start, lo, hi);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn integers(mode in 0u8..3, v in (0u8..3).prop_flat_map(ints)) {
        let _ = mode;
        let i64s: ArrayRef = Arc::new(Int64Array::from(v.clone()));
        round_trip(&i64s);
        let narrow = |f: fn(i64) -> i64| v.iter().map(|x| x.map(f)).collect::<Vec<_>>();
        round_trip(&(Arc::new(Int8Array::from(narrow(|x| x % 128).iter().map(|x| x.map(|x| x as i8)).collect::<Vec<_>>())) as ArrayRef));
        round_trip(&(Arc::new(Int16Array::from(narrow(|x| x % 30000).iter().map(|x| x.map(|x| x as i16)).collect::<Vec<_>>())) as ArrayRef));
        round_trip(&(Arc::new(Int32Array::from(v.iter().map(|x| x.map(|x| x as i32)).collect::<Vec<_>>())) as ArrayRef));
        round_trip(&(Arc::new(UInt8Array::from(v.iter().map(|x| x.map(|x| x as u8)).collect::<Vec<_>>())) as ArrayRef));
        round_trip(&(Arc::new(UInt16Array::from(v.iter().map(|x| x.map(|x| x as u16)).collect::<Vec<_>>())) as ArrayRef));
        round_trip(&(Arc::new(UInt32Array::from(v.iter().map(|x| x.map(|x| x as u32)).collect::<Vec<_>>())) as ArrayRef));
        round_trip(&(Arc::new(UInt64Array::from(v.iter().map(|x| x.map(|x| x as u64)).collect::<Vec<_>>())) as ArrayRef));
        round_trip(&(Arc::new(Date32Array::from(v.iter().map(|x| x.map(|x| x as i32)).collect::<Vec<_>>())) as ArrayRef));
        round_trip(&(Arc::new(TimestampMicrosecondArray::from(v.clone()).with_timezone("UTC")) as ArrayRef));
        // Decimals whose unscaled values fit 64 bits are bit-packed (never plain); a chunk
        // with one value past 64 bits is stored plain, 16 bytes a value. (`round_trip`
        // gives the whole array's encodings at 0 and 2, its slices' at 1 and 3.)
        let dec = |w: Vec<Option<i128>>| -> ArrayRef {
            Arc::new(Decimal128Array::from(w).with_precision_and_scale(38, 2).unwrap())
        };
        let fits: Vec<Option<i128>> = v.iter().map(|x| x.map(i128::from)).collect();
        let seen = round_trip(&dec(fits.clone()));
        if v.iter().any(Option::is_some) {
            for e in [&seen[0], &seen[2]] {
                prop_assert!(matches!(e, Encoding::ForPacked { .. } | Encoding::DeltaPacked { .. }), "{e:?}");
            }
        }
        let mut wide = fits.clone();
        if let Some(x) = wide.iter_mut().find(|x| x.is_some()) {
            *x = Some(i128::from(i64::MIN) - 1);
            let seen = round_trip(&dec(wide));
            prop_assert_eq!((&seen[0], &seen[2]), (&Encoding::Plain, &Encoding::Plain));
        }
        round_trip(&dec(v.iter().map(|x| x.map(|x| i128::from(x) << 20)).collect()));
    }

    #[test]
    fn floats(v in prop_oneof![opt_vec(any::<f64>()), opt_vec((0i32..20).prop_map(|x| f64::from(x) / 4.0)), opt_vec(prop_oneof![Just(f64::NAN), Just(-0.0), Just(0.0), Just(f64::INFINITY)])]) {
        round_trip(&(Arc::new(Float64Array::from(v.clone())) as ArrayRef));
        round_trip(&(Arc::new(Float32Array::from(v.iter().map(|x| x.map(|x| x as f32)).collect::<Vec<_>>())) as ArrayRef));
    }

    #[test]
    fn strings_and_binary(v in prop_oneof![opt_vec(".{0,20}"), opt_vec(prop_oneof![Just("Beijing".to_string()), Just("Xi'an".into()), Just("".into()), Just("東京".into())])]) {
        round_trip(&(Arc::new(StringArray::from(v.clone())) as ArrayRef));
        let b: Vec<Option<&[u8]>> = v.iter().map(|x| x.as_deref().map(str::as_bytes)).collect();
        round_trip(&(Arc::new(BinaryArray::from(b)) as ArrayRef));
        round_trip(&(Arc::new(LargeStringArray::from(v.clone())) as ArrayRef));
    }

    #[test]
    fn booleans(v in opt_vec(any::<bool>())) {
        round_trip(&(Arc::new(BooleanArray::from(v)) as ArrayRef));
    }

    #[test]
    fn vectors(dim in 1usize..9, rows in proptest::collection::vec(proptest::option::weighted(0.9, proptest::collection::vec(-1e3f32..1e3, 8)), 0..200)) {
        let values: Vec<f32> = rows.iter().flat_map(|r| r.clone().unwrap_or_else(|| vec![0.0; 8])[..dim].to_vec()).collect();
        let nulls = NullBuffer::from(rows.iter().map(Option::is_some).collect::<Vec<_>>());
        let DataType::FixedSizeList(f, _) = vector_type(dim) else { unreachable!() };
        let a = FixedSizeListArray::try_new(f.clone(), dim as i32, Arc::new(Float32Array::from(values.clone())), Some(nulls.clone())).unwrap();
        round_trip(&(Arc::new(a) as ArrayRef));
        // The stored forms, over values already rounded to them (as on insert).
        for (form, name) in [(StoredForm::Float16, "half-vector"), (StoredForm::Int8, "int8-vector")] {
            let mut v = values.clone();
            for r in v.chunks_exact_mut(dim) {
                basalt_vector::stored::round_row(form, r).unwrap();
            }
            let a: ArrayRef = Arc::new(FixedSizeListArray::try_new(f.clone(), dim as i32, Arc::new(Float32Array::from(v)), Some(nulls.clone())).unwrap());
            let seen = round_trip_as(&a, Physical::Vector { dim, form });
            prop_assert!(seen.iter().all(|e| e.name() == name), "{:?}", seen);
            // The stored form hands out the codes as they are.
            let enc = encode(a.as_ref(), Physical::Vector { dim, form }, CompressionPolicy::Never).unwrap();
            let (raw, info) = block_of(&enc, &a, Physical::Vector { dim, form });
            let st = decode(&raw, info, DecodeMode::Stored).unwrap();
            prop_assert_eq!(st.len(), a.len());
            prop_assert_eq!(st.null_count(), a.null_count());
            match form {
                StoredForm::Int8 => prop_assert_eq!(st.data_type(), &stored_vectors_type(dim)),
                _ => prop_assert!(matches!(st.data_type(), DataType::FixedSizeList(i, _) if i.data_type() == &DataType::Float16)),
            }
            // Every damaged section length is an error, never a panic.
            for i in 0..enc.sections.len() {
                let mut secs = enc.sections.clone();
                secs[i] = secs[i].saturating_sub(1);
                if secs[i] == enc.sections[i] { continue; }
                let info = ChunkInfo { sections: &secs, ..info };
                for mode in [DecodeMode::Values, DecodeMode::Stored] {
                    prop_assert!(decode(&raw, info, mode).is_err());
                }
            }
        }
    }

    #[test]
    fn nested_generic(v in proptest::collection::vec(proptest::option::weighted(0.8, proptest::collection::vec(proptest::option::of(any::<i32>()), 0..4)), 0..200)) {
        let mut b = ListBuilder::new(Int32Builder::new());
        for row in &v {
            match row {
                Some(items) => { for x in items { b.values().append_option(*x); } b.append(true); }
                None => b.append(false),
            }
        }
        let list: ArrayRef = Arc::new(b.finish());
        round_trip(&list);
        let ints: ArrayRef = Arc::new(Int32Array::from((0..v.len() as i32).collect::<Vec<_>>()));
        let s = StructArray::new(Fields::from(vec![Field::new("l", list.data_type().clone(), true), Field::new("i", DataType::Int32, false)]), vec![list, ints], None);
        round_trip(&(Arc::new(s) as ArrayRef));
    }
}

#[test]
fn encodings_are_chosen_by_size() {
    let seq: ArrayRef = Arc::new(UInt64Array::from_iter_values(1..=70_000));
    assert!(matches!(round_trip(&seq)[0], Encoding::DeltaPacked { bits: 0, .. }));
    let ages: ArrayRef =
        Arc::new(Int64Array::from_iter_values((0..70_000).map(|i| 18 + (i * 7919) % 63)));
    assert!(matches!(round_trip(&ages)[0], Encoding::ForPacked { bits: 6, .. }));
    let cities: ArrayRef = Arc::new(StringArray::from_iter_values(
        (0..70_000).map(|i| ["Beijing", "Wuhan", "Xian"][(i * 31) % 3]),
    ));
    assert!(matches!(round_trip(&cities)[0], Encoding::Dict { code_width: 1, dict_len: 3 }));
    let scores: ArrayRef = Arc::new(Float64Array::from_iter_values(
        (0..70_000).map(|i| f64::from((i * 7919) % 10_001) / 100.0),
    ));
    assert!(matches!(round_trip(&scores)[0], Encoding::Dict { code_width: 2, .. }));
    let names: ArrayRef =
        Arc::new(StringArray::from_iter_values((0..70_000).map(|i| format!("user_{i}"))));
    assert_eq!(round_trip(&names)[0], Encoding::Plain);
    let random: ArrayRef =
        Arc::new(Float64Array::from_iter_values((0..70_000).map(|i| (f64::from(i) * 1.618).sin())));
    assert_eq!(round_trip(&random)[0], Encoding::Plain);
    let ts: ArrayRef =
        Arc::new(TimestampNanosecondArray::from_iter_values(0..10).with_timezone("+08:00"));
    assert_eq!(ts.data_type(), &DataType::Timestamp(TimeUnit::Nanosecond, Some("+08:00".into())));
    round_trip(&ts);
}

/// Any byte of a string chunk (plain or dictionary) damaged past the checksum gives
/// every decoder an error or a value, never a panic; non-UTF-8 text is always an error.
#[test]
fn damaged_string_chunks_are_errors_not_panics() {
    let plain: ArrayRef =
        Arc::new(StringArray::from_iter_values((0..40).map(|i| format!("név_{i}"))));
    let dict: ArrayRef =
        Arc::new(StringArray::from_iter_values((0..40).map(|i| ["Xi'an", "Wühan"][i % 2])));
    for (a, is_dict) in [(plain, false), (dict, true)] {
        let enc = encode(a.as_ref(), Physical::Bytes, CompressionPolicy::Never).unwrap();
        assert_eq!(matches!(enc.encoding, Encoding::Dict { .. }), is_dict);
        let info = ChunkInfo {
            encoding: &enc.encoding,
            null_count: 0,
            sections: &enc.sections,
            rows: 40,
            data_type: a.data_type(),
            phys: Physical::Bytes,
            file: Path::new("t"),
            offset: 0,
        };
        let buf = |raw: &[u8]| {
            let mut m = MutableBuffer::new(raw.len());
            m.extend_from_slice(raw);
            Buffer::from(m)
        };
        for at in 0..enc.raw.len() {
            for byte in [0x00, 0x7f, 0x80, 0xff] {
                let mut raw = enc.raw.clone();
                raw[at] = byte;
                let b = buf(&raw);
                let full = decode_window(&b, info, DecodeMode::Values, 0, 40);
                let _ = decode_window(&b, info, DecodeMode::Values, 3, 30);
                let _ = decode_window(&b, info, DecodeMode::Codes, 0, 40);
                let _ = decode_rows(&b, info, &[0, 7, 39]);
                let _ = decode_cell(&raw, info, 5);
                if let Ok(full) = full {
                    // Whatever decodes is valid text (the array checked it).
                    let s = full.as_any().downcast_ref::<StringArray>().unwrap();
                    assert!(std::str::from_utf8(s.value_data()).is_ok());
                }
            }
        }
        // Text that is not UTF-8 (both layouts start with offsets, then the text).
        let text_at = align64(enc.sections[0] as usize);
        let mut raw = enc.raw.clone();
        raw[text_at] = 0xff;
        let e = decode_window(&buf(&raw), info, DecodeMode::Values, 0, 40).unwrap_err();
        assert!(e.to_string().contains("UTF-8") || e.to_string().contains("utf-8"), "{e}");
    }
}

#[test]
fn a_dictionary_code_out_of_range_is_an_error() {
    let cities: ArrayRef = Arc::new(StringArray::from_iter_values(
        (0..300).map(|i| ["Beijing", "Wuhan", "Xian"][i % 3]),
    ));
    let enc = encode(cities.as_ref(), Physical::Bytes, CompressionPolicy::Never).unwrap();
    assert!(matches!(enc.encoding, Encoding::Dict { code_width: 1, dict_len: 3 }));
    let info = ChunkInfo {
        encoding: &enc.encoding,
        null_count: 0,
        sections: &enc.sections,
        rows: 300,
        data_type: cities.data_type(),
        phys: Physical::Bytes,
        file: Path::new("t"),
        offset: 0,
    };
    let decode_all = |raw: &[u8], mode, start, len| {
        let mut m = MutableBuffer::new(raw.len());
        m.extend_from_slice(raw);
        decode_window(&m.into(), info, mode, start, len)
    };
    let mut raw = enc.raw.clone();
    assert!(decode_all(&raw, DecodeMode::Codes, 0, 300).is_ok());
    // The codes are the chunk's last section (sections start 64-byte aligned): make
    // the last row's code 3, which has no entry.
    let codes_at = enc.sections[..2].iter().fold(0, |p, &l| align64(p + l as usize));
    assert_eq!(enc.sections[2], 300);
    raw[codes_at + 299] = 3;
    for mode in [DecodeMode::Codes, DecodeMode::Values] {
        let e = decode_all(&raw, mode, 0, 300).unwrap_err();
        assert!(e.to_string().contains("dictionary"), "{e}");
        assert!(decode_all(&raw, mode, 250, 50).is_err());
        // A window that does not reach the bad code decodes.
        assert_eq!(decode_all(&raw, mode, 10, 200).unwrap().len(), 200);
    }
}

#[test]
fn damaged_metadata_is_an_error_not_a_panic() {
    let a: ArrayRef = Arc::new(StringArray::from(vec![Some("a"), None, Some("bb")]));
    let enc = encode(a.as_ref(), Physical::Bytes, CompressionPolicy::Never).unwrap();
    let mut m = MutableBuffer::new(enc.raw.len());
    m.extend_from_slice(&enc.raw);
    let raw: Buffer = m.into();
    let mut info = ChunkInfo {
        encoding: &enc.encoding,
        null_count: enc.null_count,
        sections: &enc.sections,
        rows: 3,
        data_type: a.data_type(),
        phys: Physical::Bytes,
        file: Path::new("t"),
        offset: 0,
    };
    info.rows = 1000;
    assert!(decode(&raw, info, DecodeMode::Values).is_err());
    info.rows = 3;
    info.null_count = 2;
    assert!(decode(&raw, info, DecodeMode::Values).is_err());
    info.null_count = 1;
    let big = [u64::MAX, 1, 1];
    info.sections = &big;
    assert!(decode(&raw, info, DecodeMode::Values).is_err());
    let wrong = Encoding::Dict { code_width: 1, dict_len: 9 };
    info.sections = &enc.sections;
    info.encoding = &wrong;
    assert!(decode(&raw, info, DecodeMode::Values).is_err());
}
