//! Sealed blocks as read back from the database (model::sealed): the first byte picks the
//! column kinds (up to 8, two bits each from the next two bytes), the rest is the stored block.
//! Invariants: decoding never panics and never returns more than a block holds; whatever
//! decodes, encodes again and decodes to the same columns, bit for bit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use model::sealed::{Kind, MAX_ROWS, decode, encode};

fuzz_target!(|data: &[u8]| {
    let [count, a, b, stored @ ..] = data else {
        return;
    };
    let bits = u16::from(*a) | u16::from(*b) << 8;
    let kinds: Vec<Kind> = (0..usize::from(count % 9))
        .map(|i| match (bits >> (2 * i)) & 3 {
            0 | 3 => Kind::Int,
            1 => Kind::F32,
            _ => Kind::F64,
        })
        .collect();
    let Ok(cols) = decode(&kinds, stored) else {
        return;
    };
    assert!(cols.ts.len() <= MAX_ROWS);
    assert_eq!(cols.values.len(), kinds.len());
    for (kind, column) in kinds.iter().zip(&cols.values) {
        assert_eq!(column.len(), cols.ts.len());
        if *kind == Kind::F32 {
            assert!(column.iter().flatten().all(|v| *v <= u64::from(u32::MAX)));
        }
    }
    assert_eq!(decode(&kinds, &encode(&kinds, &cols)), Ok(cols));
});
