//! Sealed blocks: the per-second samples of one series over one minute, stored as one value.
//!
//! A block is columnar: the timestamps, then each column on its own, so that what a column
//! repeats sits together. Timestamps are delta-of-delta encoded (a steady 1 Hz stream is a run
//! of zeros). A float column whose every value is exactly a decimal with at most
//! [`MAX_DECIMALS`] places (NVML reports whole percents and milliwatts, DCGM and the agent round
//! to a few places) is stored as the deltas of those decimals' integers; any other float column
//! as each value's bits XORed with the previous value's. An integer column is stored as
//! deltas, in steps of the greatest step every change is a multiple of when there is one
//! (NVML's PCIe throughput comes in KB/s, memory in pages). All
//! of it is written as LEB128 variable-length integers, and the whole is DEFLATE-compressed.
//! Every value comes back bit for bit: a column that the decimal form cannot round-trip
//! exactly keeps the XOR form.
//!
//! Stored blocks are untrusted input when read back (a database can be edited by hand): the
//! decoder bounds the inflated size and the row count and rejects, never panics on, anything
//! it did not write (`fuzz/fuzz_targets/sealed_block.rs`).

use std::io::{Read, Write};

/// What a column holds; its values travel as `u64` bits (see [`Kind::bits_of_f64`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An integer (`i64`, or a narrower one widened).
    Int,
    /// An `f32` (PostgreSQL `real`).
    F32,
    /// An `f64` (`double precision`).
    F64,
}

impl Kind {
    /// The bits a value of this kind travels as.
    pub fn bits_of_f64(self, v: f64) -> u64 {
        match self {
            Kind::Int => v as i64 as u64,
            Kind::F32 => u64::from((v as f32).to_bits()),
            Kind::F64 => v.to_bits(),
        }
    }

    /// The value `bits` stand for, as an `f64` (an `f32` widens exactly).
    pub fn as_f64(self, bits: u64) -> f64 {
        match self {
            Kind::Int => bits as i64 as f64,
            Kind::F32 => f64::from(f32::from_bits(bits as u32)),
            Kind::F64 => f64::from_bits(bits),
        }
    }
}

/// The most rows one block holds; a longer run is sealed as several blocks.
pub const MAX_ROWS: usize = 4096;
/// The most decimal places the decimal form tries.
pub const MAX_DECIMALS: u8 = 6;
/// The first byte of every block: its format.
const VERSION: u8 = 1;
/// What one block may inflate to: far above what [`MAX_ROWS`] rows of any table can take.
const MAX_INFLATED: u64 = 4 << 20;

/// One block's rows, column by column: `values[c][r]` is column `c` of row `r` (`None`: NULL).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Columns {
    pub ts: Vec<i64>,
    pub values: Vec<Vec<Option<u64>>>,
}

/// Why a stored block cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BlockError {
    #[error("sealed block: {0}")]
    Malformed(&'static str),
    #[error("sealed block: {got} columns stored, {want} expected")]
    Columns { got: u64, want: usize },
}

// Column presence and encodings, as written.
const NONE_PRESENT: u8 = 0;
const ALL_PRESENT: u8 = 1;
const SOME_PRESENT: u8 = 2;
const INT_DELTA: u8 = 0;
const FLOAT_XOR: u8 = 1;
const DECIMAL_DELTA: u8 = 2;
const INT_SCALED_DELTA: u8 = 3;

/// Encodes `block` (every column as long as `block.ts`, at most [`MAX_ROWS`] rows).
pub fn encode(kinds: &[Kind], block: &Columns) -> Vec<u8> {
    let n = block.ts.len();
    assert!(n <= MAX_ROWS, "a block holds at most {MAX_ROWS} rows");
    assert_eq!(kinds.len(), block.values.len(), "one kind per column");
    let mut raw = Vec::with_capacity(16 + n * (1 + kinds.len()));
    put_varint(&mut raw, n as u64);
    put_varint(&mut raw, kinds.len() as u64);
    let (mut prev, mut prev_delta) = (0i64, 0i64);
    for (i, &t) in block.ts.iter().enumerate() {
        let delta = t.wrapping_sub(prev);
        put_varint(
            &mut raw,
            zigzag(if i == 0 {
                t
            } else {
                delta.wrapping_sub(prev_delta)
            }),
        );
        (prev, prev_delta) = (t, if i == 0 { 0 } else { delta });
    }
    for (&kind, column) in kinds.iter().zip(&block.values) {
        assert_eq!(column.len(), n, "every column as long as the timestamps");
        encode_column(&mut raw, kind, column);
    }
    let mut out = vec![VERSION];
    let mut z = flate2::write::DeflateEncoder::new(&mut out, flate2::Compression::default());
    z.write_all(&raw).expect("writing to memory");
    z.finish().expect("writing to memory");
    out
}

fn encode_column(out: &mut Vec<u8>, kind: Kind, column: &[Option<u64>]) {
    let present: Vec<u64> = column.iter().flatten().copied().collect();
    if present.is_empty() {
        out.push(NONE_PRESENT);
        return;
    }
    if present.len() == column.len() {
        out.push(ALL_PRESENT);
    } else {
        out.push(SOME_PRESENT);
        let mut bits = vec![0u8; column.len().div_ceil(8)];
        for (i, v) in column.iter().enumerate() {
            if v.is_some() {
                bits[i / 8] |= 1 << (i % 8);
            }
        }
        out.extend_from_slice(&bits);
    }
    let deltas = |out: &mut Vec<u8>, values: &mut dyn Iterator<Item = i64>| {
        let mut prev = 0i64;
        for v in values {
            put_varint(out, zigzag(v.wrapping_sub(prev)));
            prev = v;
        }
    };
    match kind {
        Kind::Int => {
            let values: Vec<i64> = present.iter().map(|&b| b as i64).collect();
            match step_of(&values) {
                Some(step) => {
                    // Readings at a sensor's resolution (KB/s, pages): the first value, the
                    // step, then the deltas in steps.
                    out.push(INT_SCALED_DELTA);
                    put_varint(out, zigzag(values[0]));
                    put_varint(out, step);
                    for w in values.windows(2) {
                        put_varint(out, zigzag(w[1].wrapping_sub(w[0]) / step as i64));
                    }
                }
                None => {
                    out.push(INT_DELTA);
                    deltas(out, &mut values.into_iter());
                }
            }
        }
        Kind::F32 | Kind::F64 => {
            if let Some((places, ints)) = as_decimals(kind, &present) {
                out.push(DECIMAL_DELTA);
                out.push(places);
                deltas(out, &mut ints.into_iter());
            } else {
                out.push(FLOAT_XOR);
                let mut prev = 0u64;
                for &b in &present {
                    put_varint(out, b ^ prev);
                    prev = b;
                }
            }
        }
    }
}

/// The greatest common step of an integer column's changes, when it is 2 or more (every
/// change a multiple of it): PCIe throughput in NVML's KB/s, memory in pages. None when the
/// column never changes, changes by odd amounts, or a change overflows.
fn step_of(values: &[i64]) -> Option<u64> {
    let mut g = 0u64;
    for w in values.windows(2) {
        let d = w[1].checked_sub(w[0])?.unsigned_abs();
        g = gcd(g, d);
        if g == 1 {
            return None;
        }
    }
    // A step past i64 cannot divide a delta that fits; refuse it rather than wrap.
    (g >= 2 && g <= i64::MAX as u64).then_some(g)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The fewest decimal places at which every value is exactly `k / 10^places` (computed as the
/// decoder will), with the `k`s; None when no number of places up to [`MAX_DECIMALS`] does.
fn as_decimals(kind: Kind, bits: &[u64]) -> Option<(u8, Vec<i64>)> {
    'places: for places in 0..=MAX_DECIMALS {
        let scale = 10f64.powi(i32::from(places));
        let mut ints = Vec::with_capacity(bits.len());
        for &b in bits {
            let v = kind.as_f64(b);
            let k = (v * scale).round();
            if !k.is_finite() || k.abs() > 9.0e15 {
                return None;
            }
            let k = k as i64;
            if from_decimal(kind, k, scale) != b {
                continue 'places;
            }
            ints.push(k);
        }
        return Some((places, ints));
    }
    None
}

fn from_decimal(kind: Kind, k: i64, scale: f64) -> u64 {
    let v = k as f64 / scale;
    match kind {
        Kind::F32 => u64::from((v as f32).to_bits()),
        _ => v.to_bits(),
    }
}

/// Decodes a block written by [`encode`] with the same `kinds`.
pub fn decode(kinds: &[Kind], stored: &[u8]) -> Result<Columns, BlockError> {
    let (&version, body) = stored.split_first().ok_or(BlockError::Malformed("empty"))?;
    if version != VERSION {
        return Err(BlockError::Malformed("unknown format version"));
    }
    let mut raw = Vec::new();
    flate2::read::DeflateDecoder::new(body)
        .take(MAX_INFLATED + 1)
        .read_to_end(&mut raw)
        .map_err(|_| BlockError::Malformed("not a DEFLATE stream"))?;
    if raw.len() as u64 > MAX_INFLATED {
        return Err(BlockError::Malformed("inflates past the bound"));
    }
    let mut r = Reader { buf: &raw, at: 0 };
    let n = r.varint()?;
    if n > MAX_ROWS as u64 {
        return Err(BlockError::Malformed("more rows than a block holds"));
    }
    let n = n as usize;
    let cols = r.varint()?;
    if cols != kinds.len() as u64 {
        return Err(BlockError::Columns {
            got: cols,
            want: kinds.len(),
        });
    }
    let mut ts = Vec::with_capacity(n);
    let (mut prev, mut prev_delta) = (0i64, 0i64);
    for i in 0..n {
        let v = unzigzag(r.varint()?);
        let t = if i == 0 {
            v
        } else {
            prev.wrapping_add(prev_delta.wrapping_add(v))
        };
        (prev_delta, prev) = (if i == 0 { 0 } else { t.wrapping_sub(prev) }, t);
        ts.push(t);
    }
    let mut values = Vec::with_capacity(kinds.len());
    for &kind in kinds {
        values.push(decode_column(&mut r, kind, n)?);
    }
    if r.at != raw.len() {
        return Err(BlockError::Malformed("bytes after the last column"));
    }
    Ok(Columns { ts, values })
}

fn decode_column(r: &mut Reader<'_>, kind: Kind, n: usize) -> Result<Vec<Option<u64>>, BlockError> {
    let present: Vec<bool> = match r.byte()? {
        NONE_PRESENT => return Ok(vec![None; n]),
        ALL_PRESENT => vec![true; n],
        SOME_PRESENT => {
            let bits = r.bytes(n.div_ceil(8))?;
            (0..n).map(|i| bits[i / 8] & (1 << (i % 8)) != 0).collect()
        }
        _ => return Err(BlockError::Malformed("unknown column presence")),
    };
    let count = present.iter().filter(|p| **p).count();
    let mut vals = Vec::with_capacity(count);
    match (r.byte()?, kind) {
        (INT_DELTA, Kind::Int) => {
            let mut prev = 0i64;
            for _ in 0..count {
                prev = prev.wrapping_add(unzigzag(r.varint()?));
                vals.push(prev as u64);
            }
        }
        (INT_SCALED_DELTA, Kind::Int) => {
            if count > 0 {
                let mut prev = unzigzag(r.varint()?);
                let step = r.varint()?;
                if step < 2 || step > i64::MAX as u64 {
                    return Err(BlockError::Malformed("a step out of range"));
                }
                vals.push(prev as u64);
                for _ in 1..count {
                    prev = prev.wrapping_add(unzigzag(r.varint()?).wrapping_mul(step as i64));
                    vals.push(prev as u64);
                }
            }
        }
        (FLOAT_XOR, Kind::F32 | Kind::F64) => {
            let mut prev = 0u64;
            for _ in 0..count {
                prev ^= r.varint()?;
                if kind == Kind::F32 && prev > u64::from(u32::MAX) {
                    return Err(BlockError::Malformed("an f32 wider than 32 bits"));
                }
                vals.push(prev);
            }
        }
        (DECIMAL_DELTA, Kind::F32 | Kind::F64) => {
            let places = r.byte()?;
            if places > MAX_DECIMALS {
                return Err(BlockError::Malformed("too many decimal places"));
            }
            let scale = 10f64.powi(i32::from(places));
            let mut prev = 0i64;
            for _ in 0..count {
                prev = prev.wrapping_add(unzigzag(r.varint()?));
                vals.push(from_decimal(kind, prev, scale));
            }
        }
        _ => return Err(BlockError::Malformed("encoding does not match the column")),
    }
    let mut vals = vals.into_iter();
    Ok(present
        .into_iter()
        .map(|p| if p { vals.next() } else { None })
        .collect())
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8, BlockError> {
        let b = *self
            .buf
            .get(self.at)
            .ok_or(BlockError::Malformed("truncated"))?;
        self.at += 1;
        Ok(b)
    }

    fn bytes(&mut self, len: usize) -> Result<&'a [u8], BlockError> {
        let s = self
            .buf
            .get(self.at..self.at.saturating_add(len))
            .ok_or(BlockError::Malformed("truncated"))?;
        self.at += len;
        Ok(s)
    }

    fn varint(&mut self) -> Result<u64, BlockError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            let part = u64::from(b & 0x7f);
            if shift == 63 && part > 1 {
                return Err(BlockError::Malformed("a varint past 64 bits"));
            }
            v |= part << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(BlockError::Malformed("a varint past 64 bits"))
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[Option<f32>]) -> Vec<Option<u64>> {
        v.iter()
            .map(|x| x.map(|f| u64::from(f.to_bits())))
            .collect()
    }

    fn roundtrip(kinds: &[Kind], block: &Columns) -> usize {
        let bytes = encode(kinds, block);
        assert_eq!(&decode(kinds, &bytes).unwrap(), block);
        bytes.len()
    }

    #[test]
    fn a_minute_of_rounded_readings_comes_back_bit_for_bit_in_few_bytes() {
        let ts: Vec<i64> = (0..60).map(|s| 1_800_000_000_000 + s * 1000).collect();
        let util: Vec<Option<f32>> = (0..60)
            .map(|s| {
                Some(((0.9 + 0.05 * ((s as f64) * 0.7).sin()) * 1000.0).round() as f32 / 1000.0)
            })
            .collect();
        let power: Vec<Option<f32>> = (0..60)
            .map(|s| Some(((600.0 + 20.0 * ((s as f64) * 0.3).cos()) * 10.0).round() as f32 / 10.0))
            .collect();
        let energy: Vec<Option<u64>> = (0..60)
            .map(|s| Some((1.0e6 + s as f64 * 612.345).to_bits()))
            .collect();
        let block = Columns {
            ts,
            values: vec![
                f32s(&util),
                f32s(&power),
                energy,
                vec![Some(81_559_000_000); 60],
                vec![None; 60],
            ],
        };
        let kinds = [Kind::F32, Kind::F32, Kind::F64, Kind::Int, Kind::Int];
        let len = roundtrip(&kinds, &block);
        assert!(len < 60 * 8, "{len} bytes for a minute of five columns");
    }

    #[test]
    fn values_no_decimal_form_fits_keep_their_bits() {
        let odd = [
            Some(f32::NAN),
            Some(-0.0),
            Some(f32::INFINITY),
            None,
            Some(1.0e-30),
            Some(0.1 + 0.2),
            Some(f32::MAX),
            Some(f32::MIN_POSITIVE),
        ];
        let block = Columns {
            ts: vec![5, 4, 3, i64::MIN, i64::MAX, 0, -7, 1],
            values: vec![
                f32s(&odd),
                odd.iter()
                    .map(|v| v.map(|f| f64::from(f).to_bits()))
                    .collect(),
                vec![
                    Some(i64::MIN as u64),
                    Some(i64::MAX as u64),
                    None,
                    Some(0),
                    Some(1),
                    None,
                    Some(u64::MAX),
                    Some(3),
                ],
            ],
        };
        roundtrip(&[Kind::F32, Kind::F64, Kind::Int], &block);
        roundtrip(&[], &Columns::default());
    }

    /// Integer readings at a sensor's resolution (PCIe in KB/s, memory in MiB) are stored in
    /// steps of it; columns that change by odd amounts, overflow or never change keep deltas.
    #[test]
    fn readings_at_a_resolution_are_stored_in_its_steps() {
        let n = 600;
        let ts: Vec<i64> = (0..n).map(|s| 1_800_000_000_000 + s * 1000).collect();
        // splitmix64: readings that DEFLATE finds no pattern in.
        let noise = |s: i64, k: i64| {
            let mut z = (s as u64 * 2 + k as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) % 1000) as i64
        };
        let pcie: Vec<Option<u64>> = (0..n)
            .map(|s| Some((1_900_000 + noise(s, 1) * 97) as u64 * 1024))
            .collect();
        let mem: Vec<Option<u64>> = (0..n)
            .map(|s| Some((60_000 + noise(s / 60, 2) % 64) as u64 * 1_048_576))
            .collect();
        let kinds = [Kind::Int, Kind::Int];
        let block = Columns {
            ts: ts.clone(),
            values: vec![pcie.clone(), mem.clone()],
        };
        let scaled = roundtrip(&kinds, &block);
        // The same changes off the step by one byte: stored as plain deltas.
        let off = |c: &[Option<u64>]| -> Vec<Option<u64>> {
            c.iter()
                .enumerate()
                .map(|(i, v)| v.map(|v| v + (i % 2) as u64))
                .collect()
        };
        let plain = roundtrip(
            &kinds,
            &Columns {
                ts,
                values: vec![off(&pcie), off(&mem)],
            },
        );
        assert!(
            scaled * 10 < plain * 7,
            "{scaled} bytes in steps, {plain} without"
        );
        for column in [
            vec![Some(i64::MIN as u64), Some(i64::MAX as u64), Some(0)],
            vec![Some(0), Some(1u64 << 63), Some(0)],
            vec![Some(6), Some(6), Some(6)],
            vec![Some(4), None, Some(2)],
        ] {
            roundtrip(
                &[Kind::Int],
                &Columns {
                    ts: vec![1, 2, 3],
                    values: vec![column],
                },
            );
        }
    }

    #[test]
    fn the_fuzz_seed_written_by_hand_reads_as_the_format_says() {
        // fuzz/seeds/sealed_block/three_columns: three kinds, then a block of three rows.
        let seed = include_bytes!("../../fuzz/seeds/sealed_block/three_columns");
        let cols = decode(&[Kind::F32, Kind::Int, Kind::F64], &seed[3..]).unwrap();
        assert_eq!(cols.ts, vec![1000, 2000, 3000]);
        assert_eq!(cols.values[0], f32s(&[Some(0.5), Some(1.5), Some(2.5)]));
        assert_eq!(cols.values[1], vec![Some(7), None, Some(9)]);
        assert_eq!(cols.values[2], vec![None; 3]);
    }

    #[test]
    fn damaged_blocks_are_refused_in_words() {
        let kinds = [Kind::F32];
        let block = Columns {
            ts: vec![1000, 2000],
            values: vec![f32s(&[Some(0.5), None])],
        };
        let good = encode(&kinds, &block);
        assert_eq!(
            decode(&[Kind::F32, Kind::Int], &good),
            Err(BlockError::Columns { got: 1, want: 2 })
        );
        assert!(decode(&kinds, &[]).is_err());
        assert!(decode(&kinds, &[2, 0]).is_err());
        assert!(decode(&kinds, &good[..good.len() - 1]).is_err());
        // A valid DEFLATE stream of more rows than a block holds.
        let mut raw = Vec::new();
        put_varint(&mut raw, MAX_ROWS as u64 + 1);
        let mut z = flate2::write::DeflateEncoder::new(vec![VERSION], flate2::Compression::fast());
        z.write_all(&raw).unwrap();
        let e = decode(&kinds, &z.finish().unwrap()).unwrap_err();
        assert_eq!(e.to_string(), "sealed block: more rows than a block holds");
    }
}
