//! A driver's raw answers in the wire's types: NVML's unsigned percentages, byte counts,
//! clocks and counters as the batch's ratios and signed integers. Nothing here wraps: a value
//! past a wire type's range saturates, and the snapshot's domain check
//! ([`crate::out_of_domain`]) then sends a reading no GPU can have as absent.

use model::wire::v1::MAX_MEMORY_BYTES;

/// A percentage as a ratio (0–1); above 100 reads as 1.
pub(crate) fn ratio(percent: u32) -> f32 {
    (percent.min(100) as f32) / 100.0
}

/// A driver's unsigned byte count as the wire's signed one. Past the signed range it reads as
/// the largest, which lies outside the memory domain: the snapshot's domain check then clears
/// and logs it ([`crate::out_of_domain`]) instead of a wrapped negative count.
pub(crate) fn wire_bytes(raw: u64) -> i64 {
    i64::try_from(raw).unwrap_or(i64::MAX)
}

/// A device's memory size for the inventory, where it is required: 0 (unknown) where the
/// driver answers more than any GPU holds.
pub(crate) fn inventory_bytes(raw: u64) -> i64 {
    i64::try_from(raw)
        .ok()
        .filter(|b| *b <= MAX_MEMORY_BYTES)
        .unwrap_or(0)
}

/// A driver's unsigned count, clock or bit mask in the wire's signed field (`i32` or `i64`),
/// saturating: never the negative number a plain cast makes of a large one, which the collector
/// would refuse the whole batch for.
pub(crate) fn wire_count<T: TryFrom<u64> + Bounded>(raw: impl Into<u64>) -> T {
    T::try_from(raw.into()).unwrap_or(T::MAX)
}

/// The largest value of a wire integer.
pub(crate) trait Bounded {
    const MAX: Self;
}

impl Bounded for i32 {
    const MAX: i32 = i32::MAX;
}

impl Bounded for i64 {
    const MAX: i64 = i64::MAX;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_driver_values_saturate_instead_of_wrapping_negative() {
        assert_eq!(wire_count::<i32>(u32::MAX), i32::MAX);
        assert_eq!(wire_count::<i32>(1980u32), 1980);
        assert_eq!(wire_count::<i64>(u64::MAX), i64::MAX);
        assert_eq!(wire_count::<i64>(7u64), 7);
        assert_eq!(wire_bytes(u64::MAX - 615), i64::MAX);
        assert_eq!(wire_bytes(80 << 30), 80 << 30);
        assert_eq!(inventory_bytes(u64::MAX), 0);
        assert_eq!(inventory_bytes(MAX_MEMORY_BYTES as u64 + 1), 0);
        assert_eq!(inventory_bytes(80 << 30), 80 << 30);
        assert_eq!(ratio(250), 1.0);
        assert_eq!(ratio(42), 0.42);
    }
}
